"""pax.launch.tpu_slices: one table of TPU slice names that `./noxw -s aot` and `./noxw -s
cluster` both read, checked against Google's own names.

Cloud TPU's accelerator types count TensorCores on v4 and v5p (v5p-32 is 16 chips) and chips on
v5e, named v5litepod-N (https://cloud.google.com/tpu/docs/supported-tpu-configurations,
https://cloud.google.com/tpu/docs/v5e: slices 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16); GKE's
node label `cloud.google.com/gke-tpu-accelerator` names the generations tpu-v4-podslice,
tpu-v5-lite-podslice, tpu-v5p-slice and tpu-v6e-slice, with the topology beside it
(https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus).
"""

import pytest

from pax import aot
from pax.errors import UsageError
from pax.launch import cli as launch_cli
from pax.launch import render, tpu_slices

C4_16B = "C4Spmd16BAdam32Replicas"  # a mesh of 32 chips


@pytest.mark.parametrize(
    "spelling, canonical, gke, chips, topology",
    [
        ("v4-8", "v4-8", "tpu-v4-podslice", 4, "2x2x1"),
        ("v4-4096", "v4-4096", "tpu-v4-podslice", 2048, "8x16x16"),
        ("v5p-32", "v5p-32", "tpu-v5p-slice", 16, "2x2x4"),
        ("v5litepod-1", "v5litepod-1", "tpu-v5-lite-podslice", 1, "1x1"),
        ("v5litepod-8", "v5litepod-8", "tpu-v5-lite-podslice", 8, "2x4"),
        ("v5e-32", "v5litepod-32", "tpu-v5-lite-podslice", 32, "4x8"),
        ("v5litepod-128", "v5litepod-128", "tpu-v5-lite-podslice", 128, "8x16"),
        ("v5e-256", "v5litepod-256", "tpu-v5-lite-podslice", 256, "16x16"),
        ("v6e-16", "v6e-16", "tpu-v6e-slice", 16, "4x4"),
    ],
)
def test_slices_are_named_and_shaped_as_google_names_them(
    spelling, canonical, gke, chips, topology
):
    found = tpu_slices.parse(spelling)
    assert (found.name, found.generation.gke, found.chips, found.topology) == (
        canonical,
        gke,
        chips,
        topology,
    )


@pytest.mark.parametrize("generation", ["v5e", "v5litepod", "tpu-v5-lite-podslice"])
def test_a_generation_alone_is_the_slice_the_mesh_fills(generation):
    assert tpu_slices.parse(generation).sized(32).name == "v5litepod-32"


@pytest.mark.parametrize("spelling", ["v5e-32", "v5litepod-32", "v5e", "tpu-v5-lite-podslice"])
def test_cluster_and_aot_take_the_same_spellings(spelling, capsys, tmp_path):
    out = tmp_path / "jobset.yaml"
    argv = ["1.8.0", "tpu", f"--exp={C4_16B}", "--registry=r.example", f"--tpu={spelling}"]
    assert launch_cli.main([*argv, "-o", str(out)]) == 0
    # The JobSet records the canonical name and asks GKE for the generation's label.
    summary = capsys.readouterr().err.splitlines()[0]
    assert "a TPU v5litepod-32 slice (tpu-v5-lite-podslice, topology 4x8" in summary
    assert "cloud.google.com/gke-tpu-accelerator: tpu-v5-lite-podslice" in out.read_text()
    # aot parses the same spelling to the same slice for the same mesh.
    args = aot._parser().parse_args([C4_16B, "--tpu", spelling])
    (plan,) = aot._plans(args, {"tpu": False, "gpu": False})
    assert aot.slice_for(plan.generation, 32).name == "v5litepod-32"
    assert plan.chips in (None, 32)


@pytest.mark.parametrize("spelling", ["v5-32", "v5lite-32", "tpu-v5-lite-podslice-32", "v3-8"])
def test_a_wrong_spelling_is_one_line_listing_what_is_accepted(spelling, capsys, tmp_path):
    out = tmp_path / "jobset.yaml"
    argv = ["1.8.0", "tpu", f"--exp={C4_16B}", "--registry=r.example", f"--tpu={spelling}"]
    assert launch_cli.main([*argv, "-o", str(out)]) == 2 and not out.exists()
    with pytest.raises(SystemExit) as exit_:
        aot.main([C4_16B, "--tpu", spelling])
    assert exit_.value.code == 2
    cluster_err, aot_err = capsys.readouterr().err.splitlines()
    assert cluster_err.startswith(f"pax cluster: error: unknown TPU slice '{spelling}'; accepted:")
    assert aot_err.startswith("python -m pax.aot: error: argument --tpu: unknown TPU slice")
    for line in (cluster_err, aot_err):
        assert "v5e|v5litepod|tpu-v5-lite-podslice or v5litepod-N/v5e-N (N chips)" in line


def test_a_slice_the_mesh_does_not_fill_is_refused_by_both(capsys):
    with pytest.raises(UsageError, match="mesh needs 32 chips but v5e-64 has 64: use "
                       "--tpu=v5litepod-32"):  # fmt: skip
        render.render("1.8.0", "tpu", C4_16B, tpu="v5e-64", registry="r.example")
    assert aot.main([C4_16B, "--tpu", "v5e-64"]) == 2
    err = capsys.readouterr().err
    assert "--tpu v5litepod-64 has 64 chips; C4Spmd16BAdam32Replicas's mesh has 32: use --tpu " \
        "v5litepod-32" in err  # fmt: skip
