"""Two processes on 127.0.0.1 (gloo CPU collectives) train exactly as one process does, set a
damaged checkpoint aside once, and stop at one agreed step when SIGTERM reaches only one of them
or reaches them at different steps."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from pax import paths
from pax.train import preemption
from tests.helpers import truncate_files, xla_flags

ROOT = str(paths.ROOT)
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
        "XLA_FLAGS": xla_flags(devices),
    }


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rows(job_dir):
    with open(job_dir / "metrics.jsonl") as f:
        return [json.loads(line) for line in f]


# Slow tier, as every two-process training here: the fast tier joins two processes on loopback
# in test_cluster_detection, checks the meshes' losses in one process (test_train) and refuses
# a bad host index below.
@pytest.mark.slow
def test_two_processes_match_one(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    _one_process(one)
    logs = _two_processes(two)
    # Same global batch (8 rows over 8 devices), same mesh: identical losses, and one set of
    # files written by process 0 only.
    _assert_same_losses(one, two)
    assert sorted(os.listdir(two / "checkpoints")) == ["checkpoint_00000002", "checkpoint_00000004"]
    assert "step 4/4" in logs[0] and "step 4/4" not in logs[1]
    assert "M parameters" in logs[0] and "M parameters" not in logs[1]  # the run header
    manifest = json.loads((two / "manifest.json").read_text())
    assert manifest["devices"]["count"] == 8 and manifest["devices"]["process_count"] == 2

    # A damaged newest checkpoint on shared storage: both processes find it unreadable, agree,
    # and process 0 alone moves it aside (and says so); both resume from checkpoint 2.
    truncate_files(two / "checkpoints" / "checkpoint_00000004")
    logs = _two_processes(two, "--set=NUM_TRAIN_STEPS=5")
    assert os.listdir(two / "checkpoints_damaged") == ["checkpoint_00000004"]
    assert "checkpoint_00000004 is damaged" in logs[0]
    assert "is damaged" not in logs[1]
    assert f"resumed from {two}/checkpoints/checkpoint_00000002" in logs[0]
    assert [r["step"] for r in _rows(two) if r["split"] == "train"][4:] == [3, 4, 5]


def _one_process(job_dir, common=COMMON):
    """pax.main alone on 8 devices, to the end."""
    single = subprocess.run(
        [sys.executable, "-m", "pax.main", *common, f"--job_log_dir={job_dir}"],
        env=_env(8),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert single.returncode == 0, single.stderr[-2000:]


def _two_processes(job_dir, *extra, common=COMMON):
    """_pair run to the end, both exiting 0; their logs (stderr)."""
    procs = _pair(job_dir, *extra, common=common)
    logs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    return logs


def _assert_same_losses(one, two):
    a, b = _rows(one), _rows(two)
    assert [(r["split"], r["step"]) for r in a] == [(r["split"], r["step"]) for r in b]
    for x, y in zip(a, b):
        assert y["loss"] == pytest.approx(x["loss"], rel=1e-5)


def _pair(job_dir, *extra, common=COMMON):
    """pax.main as processes 0 and 1 of one job on loopback, stderr piped."""
    addr = f"127.0.0.1:{_free_port()}"
    return [
        subprocess.Popen(
            [sys.executable, "-m", "pax.main", *common, *extra, f"--job_log_dir={job_dir}"]
            + [f"--server_addr={addr}", "--num_hosts=2", f"--host_idx={i}"],
            env=_env(4),
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]


STEP_LINE = re.compile(r"step (\d+)/\d+ ")
PREEMPTED = re.compile(r"preempted: .* at step (\d+): checkpoint saved")


@pytest.mark.slow
@pytest.mark.parametrize(
    "signal_at",
    [{1: 3}, {1: 3, 0: 4}],
    ids=["sigterm-to-process-1-only", "sigterm-to-both-at-different-steps"],
)
def test_preemption_stops_every_process_at_one_step(tmp_path, signal_at):
    """signal_at: process -> the step (as process 0 logs it) after which it gets SIGTERM."""
    long_run = [a for a in COMMON if "NUM_TRAIN_STEPS" not in a and "CHECKPOINT_EVERY" not in a]
    long_run += ["--set=NUM_TRAIN_STEPS=1000", "--set=CHECKPOINT_EVERY_N_STEPS=1000"]
    procs = _pair(tmp_path, common=long_run)
    logs = [[], []]
    readers = [
        threading.Thread(target=lambda i=i: logs[i].extend(procs[i].stderr), daemon=True)
        for i in range(2)
    ]
    for reader in readers:
        reader.start()
    pending = dict(signal_at)
    deadline = time.monotonic() + 300
    while pending and time.monotonic() < deadline and procs[0].poll() is None:
        steps = [int(m.group(1)) for line in list(logs[0]) for m in [STEP_LINE.search(line)] if m]
        for i, at in list(pending.items()):
            if steps and steps[-1] >= at:
                procs[i].send_signal(signal.SIGTERM)
                del pending[i]
        time.sleep(0.05)
    codes = [p.wait(timeout=300) for p in procs]
    for reader in readers:
        reader.join(timeout=10)
    text = ["".join(log) for log in logs]
    assert codes == [preemption.EXIT_PREEMPTED] * 2, text[0][-3000:] + text[1][-3000:]
    # Each process names the step it saved; they are one step, the checkpoint is that step's,
    # and training went no further.
    [(saved_0,)] = [m.groups() for m in PREEMPTED.finditer(text[0])]
    [(saved_1,)] = [m.groups() for m in PREEMPTED.finditer(text[1])]
    saved = int(saved_0)
    assert saved == int(saved_1) and saved >= max(signal_at.values())
    assert os.listdir(tmp_path / "checkpoints") == [f"checkpoint_{saved:08d}"]
    assert max(r["step"] for r in _rows(tmp_path) if r["split"] == "train") == saved
    if len(signal_at) == 1:  # and the job resumes there
        resumed = _two_processes(tmp_path, f"--set=NUM_TRAIN_STEPS={saved + 2}", common=long_run)
        assert f"resumed from {tmp_path}/checkpoints/checkpoint_{saved:08d}" in resumed[0]


def test_bad_host_index_is_a_usage_error(pax_main, tmp_path):
    args = ["--server_addr=127.0.0.1:1", "--num_hosts=2", "--host_idx=2"]
    result = pax_main.run(*COMMON, f"--job_log_dir={tmp_path}/j", *args, devices=4)
    assert result.returncode == 2
    assert "--host_idx=2 is outside 0..1" in result.stderr


@pytest.mark.slow  # three short trainings, two of them as a pair of processes
def test_processes_sharing_a_batch_shard_feed_the_same_rows(tmp_path):
    """`mdl` across both processes (mesh [1,1,8]: one batch shard on all 8 devices): each
    process feeds the whole batch its devices hold, not its half of the rows, and the losses
    are one process's."""
    mdl_across = [a for a in COMMON if "ICI_MESH_SHAPE" not in a] + [
        "--set=ICI_MESH_SHAPE=[1,1,8]",
        "--set=NUM_HEADS=8",
        "--set=NUM_TRAIN_STEPS=2",
        "--set=CHECKPOINT_EVERY_N_STEPS=2",
    ]
    one, two = tmp_path / "one", tmp_path / "two"
    _one_process(one, common=mdl_across)
    _two_processes(two, common=mdl_across)
    _assert_same_losses(one, two)
