"""Two processes on 127.0.0.1 (gloo CPU collectives) train exactly as one process does."""

import json
import os
import socket
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMON = ["--exp=LmCloudSpmdTiny"] + [
    f"--set={a}"
    for a in (
        "NUM_LAYERS=2",
        "MODEL_DIMS=64",
        "HIDDEN_DIMS=128",
        "SEQ_LEN=32",
        "PERCORE_BATCH_SIZE=2",
        "NUM_TRAIN_STEPS=4",
        "SUMMARY_EVERY_N_STEPS=1",
        "CHECKPOINT_EVERY_N_STEPS=2",
        "EVAL_EVERY_N_STEPS=2",
        "ICI_MESH_SHAPE=[1,4,2]",
    )
]


def _env(devices):
    return {
        **os.environ,
        "PYTHONPATH": ROOT,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
    }


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rows(job_dir):
    with open(job_dir / "metrics.jsonl") as f:
        return [json.loads(line) for line in f]


def test_two_processes_match_one(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    single = subprocess.run(
        [sys.executable, "-m", "pax.main", *COMMON, f"--job_log_dir={one}"],
        env=_env(8),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert single.returncode == 0, single.stderr[-2000:]
    addr = f"127.0.0.1:{_free_port()}"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pax.main",
                *COMMON,
                f"--job_log_dir={two}",
                f"--server_addr={addr}",
                "--num_hosts=2",
                f"--host_idx={i}",
            ],
            env=_env(4),
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    logs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs[0][-2000:] + logs[1][-2000:]
    # Same global batch (8 rows over 8 devices), same mesh: identical losses, and one set of
    # files written by process 0 only.
    a, b = _rows(one), _rows(two)
    assert [(r["split"], r["step"]) for r in a] == [(r["split"], r["step"]) for r in b]
    for x, y in zip(a, b):
        assert y["loss"] == pytest.approx(x["loss"], rel=1e-5)
    assert sorted(os.listdir(two / "checkpoints")) == ["checkpoint_00000002", "checkpoint_00000004"]
    assert "step 4/4" in logs[0] and "step 4/4" not in logs[1]
    manifest = json.loads((two / "manifest.json").read_text())
    assert manifest["devices"]["count"] == 8 and manifest["devices"]["process_count"] == 2


def test_bad_host_index_is_a_usage_error(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pax.main",
            *COMMON,
            f"--job_log_dir={tmp_path}/j",
            "--server_addr=127.0.0.1:1",
            "--num_hosts=2",
            "--host_idx=2",
        ],
        env=_env(4),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "--host_idx=2 is outside 0..1" in result.stderr
