"""benchmarks/gpu_record.py and ci/h200.sh: the one-call GPU record, checked on CPU."""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import gpu_record
from benchmarks.table import ROOT

H200 = ROOT / "ci" / "h200.sh"


def _h200(tmp_path, *flags, timeout=300):
    env = dict(os.environ, PAX_PYTHON=sys.executable)
    return subprocess.run(
        [str(H200), "--dry-run", "--", "--out", str(tmp_path), *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_shell_entry_runs_a_stage_in_its_own_process_and_keeps_the_record(tmp_path):
    """ci/h200.sh --dry-run, the ceilings stage alone: the GPU XLA flags, the stage's process,
    the record under --out and the summary line (the whole dry run is the slow test below)."""
    done = _h200(tmp_path, "--stages", "ceilings")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true" in done.stdout
    lines = done.stdout.splitlines()
    assert lines[-1] == "OK" and any(line.startswith("ceilings: bf16 matmul") for line in lines)
    record = json.loads((tmp_path / "gpu_record.json").read_text())
    assert record["dry_run"] and record["environment"]["python"]
    c = record["ceilings"]
    assert c["matmul_flops"] > 0 and c["copy_bytes_per_s"] > 0 and c["stage_s"] > 0


def test_without_a_gpu_it_says_so_and_exits_2(capsys):
    assert gpu_record.main(["--out", "unused"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no GPU here" in err[0] and "--dry-run" in err[0]


def test_a_bad_option_is_one_line_and_exit_2():
    done = subprocess.run([str(H200), "--stages"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "h200: unknown option '--stages'; usage: ci/h200.sh [--wheels DIR] [--dry-run] [-- FLAGS]"
    ]


def _record(**changes):
    record = {
        "step": {
            "trainer_bf16": {"mfu": 0.60},
            "fp8_speedup": 1.4,
            "trainer_over_baseline": 0.98,
            "peak_bytes_in_use_bf16": 40 * 2**30,
        },
        "decode": {"runs": [{"roofline_fraction": 0.7}]},
        "plan": {"rows": [{"per_device_bytes": 42 * 2**30}]},
        "tier": {"tests": 12, "failures": 0, "errors": 0},
        "tiny": {"compare": {"exit": 0}},
    }
    for path, value in changes.items():
        *parents, key = path.split("__")
        node = record
        for p in parents:
            node = node[p]
        node[key] = value
    return record


@pytest.mark.parametrize(
    "change, missed",
    [
        ({"step__trainer_bf16__mfu": 0.5}, "bf16 MFU"),
        ({"step__fp8_speedup": 1.2}, "FP8 speed-up"),
        ({"step__trainer_over_baseline": 1.05}, "trainer / baseline"),
        ({"decode__runs": [{"roofline_fraction": 0.5}]}, "decode"),
        ({"plan__rows": [{"per_device_bytes": 45 * 2**30}]}, "plan"),
        ({"tier__failures": 1}, "accelerator tier"),
        ({"tiny__compare__exit": 1}, "tiny run"),
        ({"step__peak_bytes_in_use_bf16": None}, "plan"),
    ],
)
def test_each_target_missed_is_named(change, missed):
    assert gpu_record.target_problems(_record()) == []
    problems = gpu_record.target_problems(_record(**change))
    assert len(problems) == 1 and missed in problems[0], problems


RECORD = ROOT / "docs" / "gpu_record.json"


@pytest.mark.skipif(not RECORD.is_file(), reason="no H200 record kept yet (docs/benchmarks.md)")
def test_the_kept_h200_record_meets_its_targets():
    record = json.loads(RECORD.read_text())
    assert not record["dry_run"] and "H200" in record["ceilings"]["device"]
    assert gpu_record.target_problems(record) == []


# Slow tier: every stage at a tiny size (pax.main runs, pax.aot, the tier collected), minutes on
# CPU; the fast tier runs the shell entry with one stage above and the targets' verdict.
@pytest.mark.slow
def test_the_whole_dry_run_on_cpu(tmp_path):
    done = _h200(tmp_path, "--side-by-side", "2", timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((tmp_path / "gpu_record.json").read_text())
    for stage in gpu_record.STAGES:
        assert "error" not in record[stage] and "failed" not in record[stage], stage
    assert record["step"]["f8_dots_lowered"] > 0 and record["step"]["losses_finite"]
    assert record["plan"]["rows"][0]["per_device_bytes"] > 0
    assert record["decode"]["runs"][0]["tokens_per_s"] > 0
    assert record["tiny"]["compare"]["exit"] == 0, record["tiny"]["compare"]["report"]
    assert (tmp_path / "LmCloudSpmdTiny.gpu.json").is_file()
    assert record["tier"]["tests"] > 0
