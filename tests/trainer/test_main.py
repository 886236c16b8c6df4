"""The entry point's bad-input contract: one line on stderr, exit 2, nothing written."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _main(*args, devices=1):
    env = {
        **os.environ,
        "PYTHONPATH": ROOT,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
    }
    return subprocess.run(
        [sys.executable, "-m", "pax.main", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--exp=LmCloudSpmdTinny"],
            "unknown experiment 'LmCloudSpmdTinny'; closest: "
            "tasks.lm.params.lm_cloud.LmCloudSpmdTiny",
        ),
        (["--exp=LmCloudSpmdTiny", "--set=NUM_LAYER=2"], "unknown hyper-parameter 'NUM_LAYER'"),
        (["--exp=LmCloudSpmdTiny", "--set=NUM_LAYERS=2.5"], "bad value for NUM_LAYERS"),
        (
            ["--exp=LmCloudSpmdTiny", "--set=ICI_MESH_SHAPE=[1,4,1]"],
            "needs 4 devices but 1 cpu device(s) are available",
        ),
        (["--exp=C4Spmd1BAdam4Replicas", "--set=ICI_MESH_SHAPE=[1,1,1]"], "DATA_SOURCE=c4"),
        (["--exp=LmCloudSpmdTiny", "--mode=bake"], "value should be one of"),
        (["--exp=LmCloudSpmdTiny", "--set=ACTIVATION=relu2"], "ACTIVATION='relu2' is not one of"),
        (["--exp=LmCloudSpmdTiny", "--set=NUM_KV_HEADS=3"], "not a multiple of NUM_KV_HEADS=3"),
        (["--exp=LmCloudSpmdTiny", "--set=SEQ_LEN=1000000"], "fewer than SEQ_LEN+1"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, message):
    job_dir = tmp_path / "job"
    result = _main(*args, f"--job_log_dir={job_dir}")
    assert result.returncode == 2, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pax: error: ") and message in lines[0], lines[0]
    assert not job_dir.exists()


def test_missing_job_log_dir(tmp_path):
    result = _main("--exp=LmCloudSpmdTiny")
    assert result.returncode == 2
    assert "--job_log_dir is required" in result.stderr


def test_list_experiments():
    result = _main("--list_experiments")
    assert result.returncode == 0
    assert "tasks.lm.params.c4.C4Spmd1BAdam4Replicas" in result.stdout.split()


def test_eval_without_checkpoint_is_a_usage_error(tmp_path):
    result = _main("--exp=LmCloudSpmdTiny", "--mode=eval", f"--job_log_dir={tmp_path / 'job'}")
    assert result.returncode == 2
    assert "no complete checkpoint" in result.stderr
    assert not (tmp_path / "job").exists()
