"""pax.train.fp8_check (ci/gpu_check.sh's check) on a CPU machine."""

import re

import pytest

from pax.train import fp8_check


# Slow tier: both variants of the GPU check's model; the fast tier has FP8's numerics and its
# lowered FP8 dots in tests/models/test_fp8.py.
@pytest.mark.slow
def test_gpu_check_runs_on_cpu_and_says_no_gpu(capsys):
    """ci/gpu_check.sh's check, on this CPU: both variants run, FP8 dots are in the program."""
    assert fp8_check.main(["--steps", "1", "--batch", "1"]) == 0
    out = capsys.readouterr().out
    assert "NO GPU PRESENT" in out and out.rstrip().endswith("OK")
    assert re.search(r"[1-9]\d* FP8 dot_generals in its lowered program", out)
