"""What `./noxw -s cluster` says about what it wrote: the hosts and slice, a slice that no recorded
TPU plan shows working (pax.launch.plans over docs/aot.json), and an image no cluster can pull."""

import json

import pytest

from pax.launch import cli as launch_cli
from pax.launch import plans
from pax.launch import render as cluster

RELEASE = "1.4.0"
C4_16B = "tasks.lm.params.c4.C4Spmd16BAdam32Replicas"


def _plan(slice_name, topology, fits=True, sets=(), error=None):
    return {
        "experiment": C4_16B,
        "sets": list(sets),
        "target": {"slice": slice_name, "topology": topology},
        "fits": fits,
        "compile_error": error,
    }


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """Point the cluster command at aot records of the test's own."""

    def write(*records):
        path = tmp_path / "aot.json"
        path.write_text(json.dumps(list(records)))
        monkeypatch.setattr(plans, "AOT_JSON", path)

    return write


def _cluster(tmp_path, capsys, *args):
    out = tmp_path / "out.yaml"
    code = launch_cli.main([RELEASE, *args, "-o", str(out)])
    return code, out, capsys.readouterr().err.splitlines()


def test_a_slice_with_a_recorded_plan_that_fits_is_written_and_named(recorded, tmp_path, capsys):
    recorded(_plan("v4-64", "v4:2x4x4"))
    code, out, err = _cluster(
        tmp_path, capsys, "tpu", "--exp=C4Spmd16BAdam32Replicas", "--registry=r.example"
    )
    assert code == 0 and out.is_file()
    assert err == [
        f"pax cluster: wrote {out}: JobSet pax-c4spmd16badam32replicas, {C4_16B} on a TPU "
        "v4-64 slice (tpu-v4-podslice, topology 2x4x4: 8 hosts x 4 chips), image "
        f"r.example/pax:{RELEASE}-tpu"
    ]


@pytest.mark.parametrize(
    "records, warning",
    [
        ([], "C4Spmd16BAdam32Replicas on v4-64 (topology 2x4x4) is not known to work: no TPU "
         "plan of it is recorded; check it first with `./noxw -s aot -- "
         "C4Spmd16BAdam32Replicas --tpu v4-64`"),
        ([_plan("v4-64", "v4:2x4x4", sets=["NUM_LAYERS=2"])], "is not known to work"),
        ([_plan("v4-64", "v4:4x4x2")], "was planned on v4:4x4x2, this JobSet asks for 2x4x4"),
        (
            [_plan("v4-64", "v4:2x4x4", False, error="RESOURCE_EXHAUSTED: HLO temporaries")],
            "does not fit v4-64 by the TPU compiler's plan (RESOURCE_EXHAUSTED",
        ),
    ],
)  # fmt: skip
def test_a_slice_not_known_to_work_is_written_with_a_warning(
    records, warning, recorded, tmp_path, capsys
):
    recorded(*records)
    code, out, err = _cluster(
        tmp_path, capsys, "tpu", "--exp=C4Spmd16BAdam32Replicas", "--registry=r.example"
    )
    assert code == 0 and out.is_file()
    assert len(err) == 2 and err[1].startswith("pax cluster: warning: ") and warning in err[1]


def test_v5e_slices_are_matched_under_their_cloud_name(recorded, tmp_path, capsys):
    recorded(_plan("v5e-32", "v5e:4x8"))
    code, _, err = _cluster(
        tmp_path,
        capsys,
        "tpu",
        "--exp=C4Spmd16BAdam32Replicas",
        "--tpu=v5litepod-32",
        "--registry=r.example",
    )
    assert code == 0 and len(err) == 1 and "topology 4x8: 8 hosts x 4 chips" in err[0]


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_a_jobset_without_registry_is_refused_in_one_line(target, tmp_path, capsys):
    code, out, err = _cluster(tmp_path, capsys, target, "--exp=C4Spmd16BAdam32Replicas")
    assert code == 2 and not out.exists()
    assert err == [
        f"pax cluster: error: no --registry: a cluster cannot pull the local image "
        f"pax:{RELEASE}-{target}; publish it (./noxw -s publish -- {RELEASE} {target} "
        "--registry=HOST) and pass --registry=HOST"
    ]


def test_a_slurm_script_without_registry_is_written_with_a_warning(tmp_path, capsys):
    code, out, err = _cluster(tmp_path, capsys, "slurm", "--exp=C4Spmd16BAdam32Replicas")
    assert code == 0 and out.is_file()
    assert err[0].endswith(f"on 4 hosts x 8 GPUs, image pax:{RELEASE}-gpu")
    assert err[1].startswith(
        f"pax cluster: warning: no --registry: the script runs the local image pax:{RELEASE}-gpu"
    )


def test_the_jobsets_topologies_are_the_ones_aot_plans():
    """Every whole-host TPU slice aot recorded is the slice and topology a JobSet asks for."""
    checked = 0
    for r in plans.records():
        generation, _, shape = (r["target"].get("topology") or "").partition(":")
        chips = r["devices"]
        cloud = {"v5e": f"v5litepod-{chips}", "v4": f"v4-{2 * chips}"}
        if generation not in cloud or chips < cluster.CHIPS_PER_TPU_HOST:
            continue  # GPU and XLA:CPU plans, and one-chip ones, which no TPU JobSet asks for
        name = cloud[generation]
        assert plans.slice_name(r) == name
        found = cluster.tpu_slice(name)
        assert (found.chips, found.topology) == (chips, shape), r["target"]
        checked += 1
    assert checked >= 6


def test_usage_errors_are_one_line(tmp_path, capsys):
    code, _, err = _cluster(tmp_path, capsys, "tpux", "--exp=C4Spmd16BAdam32Replicas")
    assert code == 2 and len(err) == 1
    assert err[0].startswith("pax cluster: error: argument target: invalid choice: 'tpux'")
