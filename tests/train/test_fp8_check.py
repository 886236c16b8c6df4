"""pax.train.fp8_check (ci/gpu_check.sh's check) on a CPU machine: the FP8 path run on CPU, and
the FP8 step compiled for an H100 by the CUDA compiler of the release's gpu env."""

import importlib.util
import os
import re
import subprocess

import pytest

from pax import paths
from pax.environments import venv
from pax.launch import xla_flags
from pax.parallel import gpu_targets
from pax.releases import catalog
from pax.train import compiled_step, fp8_check, placement
from pax.train.instantiate import instantiate

ROOT = str(paths.ROOT)
# The CUDA compiler is jax's CUDA plugin, which the release's gpu env holds (ci/gpu_check.sh
# RELEASE -- --target h100 builds it; CI runs that before the tests). The tests' env has none.
GPU_PYTHON = venv.existing_python(catalog.newest(), "gpu")
needs_cuda_compiler = pytest.mark.skipif(
    GPU_PYTHON is None,
    reason=f"no gpu env (.venv/pax-{catalog.newest().version}-gpu) with jax's CUDA plugin; "
    f"build it with ci/gpu_check.sh {catalog.newest().version} -- --target h100",
)


def check_for_target(*args, xla: str) -> subprocess.CompletedProcess:
    """`python -m pax.train.fp8_check --target ...` in the gpu env, as ci/gpu_check.sh runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
    return subprocess.run(
        [str(GPU_PYTHON), "-m", "pax.train.fp8_check", "--target", *args],
        cwd=ROOT,
        env={**env, "PYTHONPATH": ROOT, "XLA_FLAGS": xla},
        capture_output=True,
        text=True,
        timeout=900,
    )


def f8_gemm_line(out: str) -> tuple[int, int]:
    """(cuBLASLt FP8 GEMMs, FP8 dot_generals) from the check's one line naming the call."""
    m = re.search(
        rf"^{re.escape(fp8_check.F8_GEMM)}: (\d+) in the FP8 step, for its (\d+)", out, re.M
    )
    assert m, out
    return int(m.group(1)), int(m.group(2))


# Slow tier: both variants of the GPU check's model; the fast tier has FP8's numerics and its
# lowered FP8 dots in tests/models/test_fp8.py.
@pytest.mark.slow
def test_gpu_check_runs_on_cpu_and_says_no_gpu(capsys):
    """ci/gpu_check.sh's check, on this CPU: both variants run, FP8 dots are in the program."""
    assert fp8_check.main(["--steps", "1", "--batch", "1"]) == 0
    out = capsys.readouterr().out
    assert "NO GPU PRESENT" in out and out.rstrip().endswith("OK")
    assert re.search(r"[1-9]\d* FP8 dot_generals in its lowered program", out)


def test_an_a100_has_no_fp8_tensor_cores_one_line_and_exit_2(capsys):
    assert fp8_check.main(["--target", "a100"]) == 2
    out = capsys.readouterr()
    assert out.err == "" and out.out.count("\n") == 1
    assert "NVIDIA A100" in out.out and "compute capability 8.0" in out.out
    assert "has no FP8 tensor cores" in out.out


def test_an_unknown_gpu_is_refused_with_the_known_ones(capsys):
    assert fp8_check.main(["--target", "v100"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pax fp8 check: error: unknown GPU 'v100'; one of a100, h100, h200")


def test_without_the_cuda_plugin_it_names_the_gpu_env(capsys):
    if importlib.util.find_spec("jax_plugins") is not None:
        pytest.skip("jax's CUDA plugin is installed in this env")
    assert fp8_check.main(["--target", "h100"]) == 2
    err = capsys.readouterr().err
    assert "jax-cuda12-plugin" in err and "ci/gpu_check.sh" in err and err.count("\n") == 1


def test_gpu_descriptions_read_from_the_repository():
    h100, h200, a100 = (gpu_targets.get(n) for n in ("h100", "h200", "a100"))
    assert (h100.compute_capability, h100.sms, h100.fp8) == ((9, 0), 132, True)
    assert (a100.compute_capability, a100.sms, a100.fp8) == ((8, 0), 108, False)
    # An H100 SXM reports 79.1 GiB of its 80 GB; an H200 the 141 GB its data sheet names.
    assert 79 * 2**30 < h100.memory_bytes < 80 * 2**30
    assert 140 * 2**30 < h200.memory_bytes < 141 * 2**30
    assert h200.compute_capability == h100.compute_capability and h200.device == "NVIDIA H200"


def test_gpu_topologies_fill_nodes_of_eight():
    assert gpu_targets.topology(1) == "1x1x1"
    assert gpu_targets.topology(8) == "1x1x8"
    assert gpu_targets.topology(32) == "1x4x8"
    with pytest.raises(gpu_targets.UsageError, match="do not fill nodes of 8"):
        gpu_targets.topology(12)


def test_the_model_counts_its_fp8_matmuls_per_layer():
    """Four FP8 einsums a layer (fused QKV, attention output, the FFN's two), each stacked
    once per layer; none without USE_FP8."""
    import jax

    for use_fp8 in (True, False):
        experiment = compiled_step.one_device("LmCloudSpmdTiny", 1, USE_FP8=use_fp8)
        run = instantiate(experiment, devices=jax.devices()[:1])
        place = placement.Spmd(run)
        layers = run.task.model.num_layers
        assert fp8_check.fp8_matmuls(place.abstract) == (4 * layers if use_fp8 else 0)


# Slow tier: the CUDA compiler compiles the 1B model's BF16 and FP8 steps, about a minute each
# on 2 cores.
@pytest.mark.slow
@needs_cuda_compiler
def test_the_cuda_compiler_rewrites_every_fp8_dot_of_the_1b_step_for_an_h100():
    r = check_for_target("h100", xla=xla_flags.value())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    gemms, dots = f8_gemm_line(r.stdout)
    assert gemms >= 1 and gemms == dots
    assert "NVIDIA H100 80GB HBM3" in r.stdout and r.stdout.rstrip().endswith("OK")
    # 13 layers x 4 FP8 einsums, forward; the backward's two per forward one.
    assert "FP8 dense matmuls per step: 52 forward + 104 backward = 156" in r.stdout
    assert re.search(r"^bf16 .*GEMM calls \d+ __cublas\$lt\$matmul;", r.stdout, re.M)


@pytest.mark.slow
@needs_cuda_compiler
def test_without_the_image_xla_flags_the_fp8_gemms_are_missing_and_it_fails():
    """XLA's default leaves the dots to Triton: no cuBLASLt FP8 GEMM, exit 1."""
    r = check_for_target("h100", xla="")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    gemms, dots = f8_gemm_line(r.stdout)
    assert gemms == 0 and dots > 0
    assert "FAIL: XLA rewrote 0 of the FP8 step's" in r.stdout and "XLA_FLAGS" in r.stdout
