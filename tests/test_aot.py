"""Pax's reference experiments compile for their real meshes, at real size, with no TPU: the TPU
compiler's plan where the release's tpu env (libtpu) is built, XLA:CPU's upper bound elsewhere;
docs/parallelism.md's table is what docs/aot.json says."""

import json
import os
import re
import subprocess
import sys

import pytest

from pax import aot, paths
from pax.environments import venv
from pax.experiments import registry
from pax.releases import catalog
from tests.helpers import readme_block, xla_flags

ROOT = str(paths.ROOT)
TINY = "tasks.lm.params.lm_cloud.LmCloudSpmdTiny"
# The TPU compiler is libtpu, which the release's tpu env holds (./noxw -s aot builds it; CI
# runs that session before the tests). The tests' own env (cpu) has none.
TPU_PYTHON = venv.existing_python(catalog.newest(), "tpu")
needs_libtpu = pytest.mark.skipif(
    TPU_PYTHON is None,
    reason=f"no tpu env with libtpu (.venv/pax-{catalog.newest().version}-tpu); build it with "
    "./noxw -s aot -- tasks.lm.params.lm_cloud.LmCloudSpmdTiny --tpu v5e",
)


def _aot(out, *args, python=sys.executable, expect_rc=0, fast_compile=False):
    """`python -m pax.aot ARGS --json OUT` as a user runs it (it makes its own devices);
    fast_compile: XLA:CPU with the session's flags, for a test that reads no figure of the plan
    a user would get."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    if fast_compile:
        env["XLA_FLAGS"] = xla_flags(None)
    result = subprocess.run(
        [str(python), "-m", "pax.aot", *args, "--json", str(out)],
        cwd=ROOT,
        env={**env, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == expect_rc, result.stderr[-3000:]
    rows = json.loads(out.read_text())
    return {(r["experiment"].rsplit(".", 1)[1], r["target"]["slice"]): r for r in rows}, result


# For a test of which compiler plans and what it says, not of the plan: one of the tiny
# experiment's four layers compiles in a fraction of the time.
ONE_LAYER = ("--set", "NUM_LAYERS=1")


def _one(rows):
    (row,) = rows.values()
    return row


def test_without_libtpu_xla_cpu_plans_the_tiny_experiment_as_an_upper_bound(tmp_path):
    # The slice in the short spelling: recorded under Cloud TPU's name.
    args = (TINY, "--tpu", "v5e-1", "--cpu", *ONE_LAYER)
    rows, result = _aot(tmp_path / "aot.json", *args, fast_compile=True)
    row = _one(rows)
    assert row["compiler"] == "XLA:CPU" and row["target"]["topology"] is None
    assert row["target"]["slice"] == "v5litepod-1" and row["target"]["hbm_bytes"] == 16 * 2**30
    assert row["params"] > 0 and row["devices"] == 1 and row["fits"]
    assert 0 < row["per_device_bytes"] <= 16 * 2**30
    assert set(row["mesh"]) == {"replica", "data", "mdl"}
    assert "XLA:CPU plan for v5litepod-1:" in result.stdout


@pytest.fixture(scope="module")
def fallbacks(tmp_path_factory):
    """One `pax.aot` run planning, for each platform whose own compiler this env lacks, one
    target (TPU v4, H100) on XLA:CPU: what the fallback tests read."""
    targets = [] if aot.libtpu_version() else ["--tpu", "v4"]
    targets += [] if aot.cuda_plugin_version() else ["--gpu", "h100"]
    out = tmp_path_factory.mktemp("fallbacks") / "aot.json"
    rows, result = _aot(out, TINY, *targets, *ONE_LAYER, fast_compile=True)
    return {row["platform"]: row for row in rows.values()}, result


def test_the_cpu_env_falls_back_to_xla_cpu_and_says_so(request):
    if aot.libtpu_version():
        pytest.skip("libtpu is importable in this env: no fallback to see")
    rows, result = request.getfixturevalue("fallbacks")
    assert rows["tpu"]["compiler"] == "XLA:CPU"
    assert "libtpu is not importable here" in result.stderr


# Slow tier: the TPU compiler takes minutes over the tiny's unrolled float32 layers on 2 cores.
@pytest.mark.slow
@needs_libtpu
def test_the_tpu_compiler_plans_the_tiny_experiment_for_one_v5e_chip(tmp_path):
    # Compiled for a TPU, attention is the splash kernel (ATTENTION_KERNEL=auto), as on a chip.
    rows, result = _aot(tmp_path / "aot.json", TINY, "--tpu", "v5e", python=TPU_PYTHON)
    row = _one(rows)
    assert row["attention"] == "splash"
    assert row["compiler"].startswith("TPU (libtpu ")
    assert row["target"] == {
        "generation": "TPU v5e",
        "slice": "v5litepod-1",
        "topology": "v5e:1x1",
        "hbm_bytes": 16 * 2**30,
    }
    # memory_analysis() answered: arguments (the state) and temporaries, within one chip.
    assert row["fits"] and row["compile_error"] is None
    assert 0 < row["temp_bytes"] < row["per_device_bytes"] < 2**30
    assert "TPU (libtpu" in result.stdout and "v5e:1x1" in result.stdout


@needs_libtpu
def test_the_tpu_compiler_refuses_the_1b_config_on_one_v5e_chip_with_its_figure(tmp_path):
    """The TPU compiler refuses it with its own figure: above the 15.75 GiB a v5e chip has,
    and no more than the 22.9 GB of temporaries a chip reported for it (an earlier trainer,
    whose optimizer update went through a branch and held more buffers)."""
    sets = ["--set", "ICI_MESH_SHAPE=(1,1,1)", "--set", "PERCORE_BATCH_SIZE=4"]
    rows, result = _aot(
        tmp_path / "aot.json",
        "C4Spmd1BAdam4Replicas",
        "--tpu",
        "v5e",
        *sets,
        python=TPU_PYTHON,
        expect_rc=1,
    )
    row = _one(rows)
    assert not row["fits"] and "RESOURCE_EXHAUSTED" in row["compile_error"]
    assert row["sets"] == ["ICI_MESH_SHAPE=(1,1,1)", "PERCORE_BATCH_SIZE=4"]
    assert row["hbm_available_bytes"] < row["per_device_bytes"] <= 22.87 * 2**30
    assert 15 * 2**30 < row["hbm_available_bytes"] <= 16 * 2**30
    assert "did not compile or does not fit" in result.stderr


def test_out_of_hbm_messages_are_read_as_bytes():
    v5e = (
        "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
        "temporaries (22.87G) exceeds available HBM (15.75G)."
    )
    assert aot.parse_out_of_memory(v5e) == (int(22.87 * 2**30), int(15.75 * 2**30))
    assert aot.parse_out_of_memory("Used 40.5G of 31.25G hbm.") == (
        int(40.5 * 2**30),
        int(31.25 * 2**30),
    )
    assert aot.parse_out_of_memory("INTERNAL: something else") is None


def test_slices_are_named_as_cloud_names_them():
    assert aot.slice_for("v4", 4).name == "v4-8"  # Cloud counts v4 TensorCores, two a chip
    assert aot.slice_for("v4", 32).topology == "v4:2x4x4"  # Pax's 16B ran on a v4-64
    assert aot.slice_for("v5e", 256).topology == "v5e:16x16"
    assert aot.slice_for("v5e", 1).name == "v5litepod-1"
    with pytest.raises(aot.UsageError, match="no TPU v5e slice of 3 chips"):
        aot.slice_for("v5e", 3)


def test_a_bad_override_or_a_mesh_no_slice_has_is_a_usage_error(capsys):
    assert aot.main([TINY, "--set", "NO_SUCH=1"]) == 2
    assert "unknown hyper-parameter 'NO_SUCH'" in capsys.readouterr().err
    assert aot.main([TINY, "--set", "ICI_MESH_SHAPE=(1,3,1)"]) == 2
    assert "no TPU v4 slice of 3 chips" in capsys.readouterr().err


# Slow tier: every reference experiment at full size (minutes); the fast tier compiles the tiny
# experiment the same way above.
@pytest.mark.slow
def test_reference_experiments_compile_at_full_size_on_xla_cpu(tmp_path):
    rows, _ = _aot(tmp_path / "aot.json", *registry.pax_references(), "--tpu", "v4", "--cpu")
    rows = {name: r for (name, _), r in rows.items()}
    # The names promise 1B and 2B parameters; counted abstractly, within 15%.
    assert rows["C4Spmd1BAdam4Replicas"]["params"] == pytest.approx(1e9, rel=0.15)
    assert rows["LmCloudSpmd2BLimitSteps"]["params"] == pytest.approx(2e9, rel=0.15)
    for name in ("C4Spmd1BAdam4Replicas", "LmCloudSpmd2BLimitSteps"):
        assert rows[name]["devices"] == 4
        assert rows[name]["mesh"] == {"replica": 1, "data": 4, "mdl": 1}
    pmapped = rows["LmCloudTransformerAdamLimitSteps"]
    assert pmapped["strategy"] == "pmap" and pmapped["devices"] == 4  # Pax ran it on a v4-8
    piped = rows["C4SpmdPipelineGpt3SmallAdam64Replicas"]
    assert piped["devices"] == 64
    assert piped["mesh"] == {"stage": 4, "replica": 1, "data": 4, "mdl": 4}
    # Pax: 64 rows (per-core batch 1) in microbatches of MICROBATCH_SIZE=16: 4 microbatches.
    assert piped["pipeline"] == {"stages": 4, "microbatches": 4, "bubble_fraction": 3 / 7}
    # The compile table (docs/aot.json) counts the same parameters; XLA:CPU's plan is an upper
    # bound of the TPU compiler's recorded there (10% for the noise of XLA:CPU's own plan, which
    # moves a little with the host CPU's features, where a row recorded is XLA:CPU's).
    recorded = {
        (r["experiment"].rsplit(".", 1)[1], r["target"]["slice"]): r
        for r in json.loads(open(os.path.join(ROOT, "docs", "aot.json")).read())
        if not r["sets"]
    }
    # Every reference experiment has its TPU compiler's plan on its v4 slice, the 16B run on a
    # v4-64 included (each host there feeds batch rows that are not adjacent).
    assert all((name, r["target"]["slice"]) in recorded for name, r in rows.items())
    for name, r in rows.items():
        tpu = recorded[(name, r["target"]["slice"])]
        assert r["params"] == tpu["params"]
        assert r["per_device_bytes"] >= 0.9 * tpu["per_device_bytes"]


def test_the_aot_table_is_rendered_from_docs_aot_json():
    page = str(aot.TABLE_PAGE.relative_to(aot.ROOT))
    assert readme_block(aot.START, aot.END, page) == f"\n\n{aot.recorded_table()}\n\n", (
        f"{page}'s compile table differs from docs/aot.json; run ./noxw -s aot (or readme)"
    )


def test_aot_table_rows():
    row = {
        "experiment": "tasks.lm.params.c4.X",
        "sets": [],
        "params": 2.88e9,
        "strategy": "spmd",
        "mesh": {"stage": 4, "data": 4},
        "devices": 16,
        "attention": "splash",
        "target": {
            "generation": "TPU v4",
            "slice": "v4-32",
            "topology": "v4:2x2x4",
            "hbm_bytes": 32 * 2**30,
        },
        "compiler": "TPU (libtpu 0.0.42.1)",
        "per_device_bytes": 3 * 2**30,
        "fits": True,
        "compile_error": None,
        "compile_s": 29.4,
        "pipeline": {"stages": 4, "microbatches": 16, "bubble_fraction": 3 / 19},
    }
    refused = {
        **row,
        "sets": ["NUM_LAYERS=6"],
        "pipeline": False,
        "fits": False,
        "compile_error": "RESOURCE_EXHAUSTED: ...",
        "hbm_available_bytes": 31.25 * 2**30,
        "per_device_bytes": 40 * 2**30,
    }
    cpu = {
        **row,
        "pipeline": False,
        "fits": False,
        "compiler": "XLA:CPU",
        "target": {**row["target"], "topology": None},
        "per_device_bytes": 34 * 2**30,
    }
    lines = aot.render_table([row, refused, cpu]).splitlines()
    assert lines[2] == (
        "| X | 2.88B | spmd: stage 4, data 4 (4 stages × 16 microbatches, bubble 15.8%) | "
        "v4-32 (16), `v4:2x2x4` | TPU (libtpu 0.0.42.1) | splash | 3.0 GiB | 32.0 GiB | fits | "
        "29 s |"
    )
    assert lines[3] == (
        "| X `NUM_LAYERS=6` | 2.88B | spmd: stage 4, data 4 | v4-32 (16), `v4:2x2x4` | "
        "TPU (libtpu 0.0.42.1) | splash | temporaries alone 40.0 GiB > 31.2 GiB usable | "
        "32.0 GiB | no | 29 s |"
    )
    assert lines[4] == (
        "| X | 2.88B | spmd: stage 4, data 4 | v4-32 (16) | XLA:CPU (upper bound) | splash | "
        "34.0 GiB | 32.0 GiB | not by this plan | 29 s |"
    )


def test_the_recorded_tpu_plans_are_the_memory_the_chip_reported():
    """docs/aot.json's one-chip v5e plans (the TPU compiler run on a CPU host) against the
    memory the compiled step reported on a v5e chip for the same settings (docs/bench.json,
    benchmarks/tpu_bench.py): within 10%, temporaries and the whole plan alike. A plan the
    compiler accepted trained there, whatever its sum."""
    with open(os.path.join(ROOT, "docs", "aot.json")) as f:
        plans = [r for r in json.load(f) if r["compiler"].startswith("TPU") and r["devices"] == 1]
    with open(os.path.join(ROOT, "docs", "bench.json")) as f:
        (chip,) = [r for r in json.load(f) if r.get("kind") == "accelerator"]
    layers = f"NUM_LAYERS={chip['model']['layers']}"
    compared = 0
    for row in chip["rows"]:
        measured = row["trainer"].get("splash", {}).get("memory")
        plan = next(
            (
                p
                for p in plans
                if layers in p["sets"]
                and p["global_batch"] == row["batch"]
                and p["remat"] == row["remat"]
                and p["attention"] == "splash"
            ),
            None,
        )
        if plan is None or measured is None:
            continue
        whole = (
            measured["arguments"]
            + measured["outputs"]
            - measured["aliased"]
            + measured["temporaries"]
        )
        assert plan["temp_bytes"] == pytest.approx(measured["temporaries"], rel=0.10)
        assert plan["per_device_bytes"] == pytest.approx(whole, rel=0.10)
        assert plan["fits"] and plan["compile_error"] is None
        compared += 1
    assert compared >= 2, "docs/aot.json and docs/bench.json share fewer than two settings"


# The CUDA compiler is jax's CUDA plugin, which the release's gpu env holds (./noxw -s aot -- gpu
# builds it). The tests' own env (cpu) has none.
GPU_PYTHON = venv.existing_python(catalog.newest(), "gpu")
needs_cuda_compiler = pytest.mark.skipif(
    GPU_PYTHON is None,
    reason=f"no gpu env with jax's CUDA plugin (.venv/pax-{catalog.newest().version}-gpu); "
    "build it with ./noxw -s aot -- gpu",
)


def test_gpus_fill_nodes_of_eight():
    assert aot.slice_for("h100", 8).name == "1×8 H100"
    assert aot.slice_for("h100", 32).name == "4×8 H100"  # the 16B's mesh: 4 nodes
    assert aot.slice_for("h200", 32).topology == "cuda:1x4x8"
    assert aot.slice_for("h100", 8).hbm_bytes == aot.gpu_targets.get("h100").memory_bytes
    with pytest.raises(aot.UsageError, match="do not fill nodes of 8"):
        aot.slice_for("h100", 12)


def test_without_the_cuda_plugin_xla_cpu_plans_a_gpu_target_and_says_so(request):
    if aot.cuda_plugin_version():
        pytest.skip("jax's CUDA plugin is importable in this env: no fallback to see")
    rows, result = request.getfixturevalue("fallbacks")
    row = rows["gpu"]
    assert row["compiler"] == "XLA:CPU" and row["platform"] == "gpu"
    assert row["target"]["slice"] == "1×1 H100" and row["target"]["topology"] is None
    assert "jax's CUDA plugin is not importable here" in result.stderr


# Slow tier: the CUDA compiler compiles the 1B step sharded over 8 GPUs, about a minute on 2 cores.
@pytest.mark.slow
@needs_cuda_compiler
def test_the_cuda_compiler_plans_the_1b_on_one_node_of_eight_h100s(tmp_path):
    rows, result = _aot(
        tmp_path / "aot.json",
        "C4Spmd1BAdam4Replicas",
        "--gpu",
        "h100",
        "--set",
        "ICI_MESH_SHAPE=(1,8,1)",
        python=GPU_PYTHON,
    )
    row = _one(rows)
    assert re.match(r"CUDA \(jax-cuda1[23]-plugin \d", row["compiler"]), row["compiler"]
    assert row["target"] == {
        "generation": "NVIDIA H100 80GB HBM3",
        "slice": "1×8 H100",
        "topology": "cuda:1x1x8",
        "hbm_bytes": aot.gpu_targets.get("h100").memory_bytes,
    }
    assert row["attention"] == "xla" and row["mesh"] == {"replica": 1, "data": 8, "mdl": 1}
    # memory_analysis() answered: the state's eighth and the temporaries, well within 80 GB.
    assert row["fits"] and 0 < row["temp_bytes"] < row["per_device_bytes"] < 80 * 2**30
    assert row["compiler"] in result.stdout and "1×8 H100 (cuda:1x1x8)" in result.stdout
