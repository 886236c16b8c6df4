"""Tests run on CPU with 8 virtual devices; XLA_FLAGS must be set before jax is imported.

Two tiers: the default one (`./noxw -s test`) checks every module's behaviour at the smallest
sizes where each claim holds; tests marked `slow` (long runs, multi-process jobs, real engines)
run only with `--full` (`./noxw -s test -- --full`), as CI does.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()


def _accelerator_tier(args) -> bool:
    """Whether this run selects the tests marked `accelerator` (`-m accelerator`)."""
    for i, arg in enumerate(args):
        expression = args[i + 1] if arg == "-m" and i + 1 < len(args) else None
        if arg.startswith("-m") and len(arg) > 2:
            expression = arg[2:].lstrip("=")
        if expression and "accelerator" in expression and "not accelerator" not in expression:
            return True
    return False


# The default tiers run on CPU whatever the machine has. The accelerator tier leaves
# JAX_PLATFORMS alone, so jax takes the machine's TPU or GPU (its CPU stays there beside it for
# the tests that compare the two).
if not _accelerator_tier(sys.argv):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    # The tests' models are tiny: LLVM's optimizations of XLA:CPU's code take longer to compile
    # (a third of a short run) than they save; the results differ by float32 rounding at most.
    os.environ["XLA_FLAGS"] += " --xla_backend_optimization_level=0"


def _compilation_cache() -> Path | None:
    """JAX's persistent compilation cache in the env's own folder: an env is one release on one
    lock, so the cache is keyed by release, and a test (or a pax.main it starts, which inherits
    the variables) that compiles a step another one compiled loads it instead."""
    folder = Path(sys.prefix) / "jax-compilation-cache"
    try:
        folder.mkdir(exist_ok=True)
    except OSError:  # a read-only env (an image's): compile as usual
        return None
    return folder if os.access(folder, os.W_OK) else None


if "JAX_COMPILATION_CACHE_DIR" not in os.environ and (_cache := _compilation_cache()):
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(_cache)
    # Every program, not only those over jax's default 1 s: the tiny models' steps compile in
    # a fraction of that, and loading the small programs as well costs less CPU than compiling
    # them again in another worker, another pax.main or another test's closure.
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")


def pytest_addoption(parser):
    parser.addoption(
        "--full", action="store_true", help="also run the slow tier (tests marked `slow`)"
    )


def pytest_collection_modifyitems(config, items):
    if config.getoption("--full"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


_STARTED = time.monotonic()
_FILE_SECONDS: dict[str, float] = {}  # setup + call + teardown, summed over a file's tests
SLOWEST_FILES = 10


def pytest_runtest_logreport(report):
    # Under xdist this runs in the controller too, with each worker's reports.
    path = report.nodeid.split("::")[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def _host_peak() -> float | None:
    """The host's f32 matmul FLOP/s, as the benchmarks measure it: in a process of its own, with
    every core and XLA's own flags."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"} | {"JAX_PLATFORMS": "cpu"}
    code = "from pax.train import mfu; print(mfu.measure_matmul_peak('float32'))"
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
        return float(out.stdout)
    except (subprocess.SubprocessError, ValueError):
        return None


_HOST_PEAK: float | None = None  # what pytest_configure measured, in this process


def pytest_configure(config):
    # Measured once for the run (xdist's workers inherit the variable): every training the tests
    # start, in process or as `pax.main`, takes it as its MFU denominator instead of spending
    # two seconds measuring it again.
    global _HOST_PEAK
    if _accelerator_tier(sys.argv) or "PAX_CPU_PEAK_FLOPS" in os.environ:
        return
    if (_HOST_PEAK := _host_peak()) is not None:
        os.environ["PAX_CPU_PEAK_FLOPS"] = f"float32={_HOST_PEAK:.4g}"


def _machine() -> str:
    """The cores and the f32 matmul rate the tier ran on: its wall time means little without
    them (README gives the tier's time against the same figure)."""
    cores = len(os.sched_getaffinity(0))
    if _HOST_PEAK is not None:
        rate = f"at {_HOST_PEAK / 1e9:.0f} GFLOP/s"
    else:  # the caller's own figure, or none measured
        rate = f"as given ({os.environ.get('PAX_CPU_PEAK_FLOPS', 'not measured')})"
    return f"{cores} cores, 2048x2048 f32 matmul {rate}"


def pytest_terminal_summary(terminalreporter, config):
    tier = "full (fast + slow)" if config.getoption("--full") else "fast"
    if _accelerator_tier(sys.argv):
        import jax

        tier = f"accelerator on {jax.devices()[0].device_kind}"
    passed = len(terminalreporter.stats.get("passed", []))
    minutes = (time.monotonic() - _STARTED) / 60
    if len(_FILE_SECONDS) > 1:
        terminalreporter.write_sep("=", f"slowest {SLOWEST_FILES} files")
        for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda x: -x[1])[:SLOWEST_FILES]:
            terminalreporter.write_line(f"{seconds:7.1f}s {path}")
    terminalreporter.write_line(
        f"tier {tier}: {passed} passed, {minutes:.1f} min wall on {_machine()}"
        + ("" if config.getoption("--full") else "; `--full` adds the tests marked slow")
    )


@pytest.fixture(scope="session")
def tiny_job(tmp_path_factory):
    """One finished run of tests.helpers.Tiny on one device (6 steps, checkpoints at 3
    and 6, eval at 3 and 6), trained once per test session. Read it, never write into it: a test
    that changes a job directory takes `tiny_job_copy`."""
    import jax

    from pax.train import loop
    from pax.train.instantiate import instantiate
    from tests.helpers import Tiny

    job = tmp_path_factory.mktemp("tiny") / "job"
    loop.train(instantiate(Tiny(), devices=jax.devices()[:1]), str(job), "tests.Tiny")
    return job


@pytest.fixture
def tiny_job_copy(tiny_job, tmp_path):
    """A private copy of `tiny_job` for a test that resumes, corrupts or writes into it."""
    return Path(shutil.copytree(tiny_job, tmp_path / "job", symlinks=True))


@pytest.fixture(scope="session")
def pax_main(tmp_path_factory):
    """Runs `python -m pax.main ARGS` as a process of its own: tests.helpers.PaxMain."""
    from tests.helpers import PaxMain

    main = PaxMain(tmp_path_factory.mktemp("pax_main"))
    yield main
    main.close()
