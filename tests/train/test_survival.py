"""Runs that survive: preemption, kill -9, damaged checkpoints, NaNs."""

import contextlib
import os
import re
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest

from pax import paths
from pax.checkpoint.manager import Checkpointer, CheckpointError
from pax.train import loop, preemption
from pax.train import state as state_lib
from pax.train.instantiate import instantiate
from tests.helpers import Tiny, derive, read_metrics, truncate_files, xla_flags

ROOT = str(paths.ROOT)
# One layer: these runs are about signals and resuming, and each process compiles its steps.
SMALL = [
    "NUM_LAYERS=1",
    "MODEL_DIMS=64",
    "HIDDEN_DIMS=128",
    "SEQ_LEN=32",
    "PERCORE_BATCH_SIZE=8",
    "SUMMARY_EVERY_N_STEPS=1",
    "EVAL_EVERY_N_STEPS=1000",
    "EVAL_NUM_BATCHES=1",
    "CHECKPOINT_EVERY_N_STEPS=4",
    "CHECKPOINT_MAX_TO_KEEP=2",
]
STEP_LINE = re.compile(r"step (\d+)/\d+ ")


# One CPU device, as a reader's machine has (the tests' own process has eight).
ONE_DEVICE = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(1)}


def _run_until(pax_main, job_dir, steps, kill_at=None, sig=signal.SIGTERM):
    """Runs pax.main on one device; sends `sig` once the log shows step kill_at; returns (exit
    status, log)."""
    args = [f"--set={a}" for a in SMALL + [f"NUM_TRAIN_STEPS={steps}"]]
    command = pax_main.start("--exp=LmCloudSpmdTiny", f"--job_log_dir={job_dir}", *args)
    log = []
    for line in command.lines():
        log.append(line)
        match = STEP_LINE.search(line)
        if kill_at is not None and match and int(match.group(1)) >= kill_at:
            os.kill(command.pid, sig)
            kill_at = None
    return command.wait(timeout=300), "".join(log)


def _history(job_dir):
    """Loss by step; a step run twice (after kill -9) keeps its last row."""
    return {m["step"]: m["loss"] for m in read_metrics(job_dir)}


def _checkpoints(job_dir):
    return sorted(os.listdir(os.path.join(job_dir, "checkpoints")))


def test_sigterm_saves_at_the_current_step_and_the_rerun_resumes(pax_main, tmp_path):
    status, log = _run_until(pax_main, tmp_path, 200, kill_at=6)
    assert status == preemption.EXIT_PREEMPTED, log
    saved = int(_checkpoints(tmp_path)[-1].split("_")[1])
    # The loop finishes the step in flight, saves it and stops: the newest checkpoint is the
    # last step trained, whether or not it is a periodic one.
    assert saved >= 6 and max(_history(tmp_path)) == saved, (_checkpoints(tmp_path), log)
    status, log = _run_until(pax_main, tmp_path, saved + 2)
    assert status == 0, log
    assert f"resumed from {tmp_path}/checkpoints/checkpoint_{saved:08d}" in log


# Slow tier: six runs of 22 steps; the fast tier has one SIGTERM and resume above, and the
# bitwise resume of tests/train/test_train.py.
@pytest.mark.slow
def test_soak_interruptions_change_nothing(pax_main, tmp_path):
    """Five interruptions (SIGTERM and kill -9 at varied steps); the loss history and the final
    parameters equal an uninterrupted run's bitwise (CPU execution is deterministic)."""
    steps = 22
    reference = tmp_path / "reference"
    assert _run_until(pax_main, reference, steps)[0] == 0
    job = tmp_path / "interrupted"
    for kill_at, sig in [
        (3, signal.SIGKILL),
        (6, signal.SIGTERM),
        (9, signal.SIGKILL),
        (13, signal.SIGTERM),
        (18, signal.SIGKILL),
    ]:
        status, log = _run_until(pax_main, job, steps, kill_at=kill_at, sig=sig)
        assert status in (-signal.SIGKILL, preemption.EXIT_PREEMPTED), log
        assert (
            not [d for d in os.listdir(job / "checkpoints") if "tmp" in d] or sig == signal.SIGKILL
        )
    status, log = _run_until(pax_main, job, steps)
    assert status == 0, log
    assert _history(job) == _history(reference)
    final = f"checkpoint_{steps:08d}"
    a = _restore_params(reference, final)
    b = _restore_params(job, final)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)


def _restore_params(job_dir, name):
    import orbax.checkpoint as ocp

    path = os.path.join(job_dir, "checkpoints", name, "state")
    return ocp.StandardCheckpointer().restore(path)["params"]


def test_a_checkpoint_is_saved_once_the_rows_of_its_steps_are_on_disk(tmp_path, monkeypatch):
    # A run killed (-9) after a save resumes past the saved step: a row still in a buffer then
    # would be missing from metrics.jsonl for good.
    on_disk = {}
    save = Checkpointer.save

    def save_after_reading(self, step, *args, **kwargs):
        on_disk[step] = [m["step"] for m in read_metrics(tmp_path)]
        return save(self, step, *args, **kwargs)

    monkeypatch.setattr(Checkpointer, "save", save_after_reading)
    loop.train(instantiate(Tiny(), devices=jax.devices()[:1]), str(tmp_path), "tests.Tiny")
    assert on_disk == {3: [1, 2, 3], 6: [1, 2, 3, 4, 5, 6]}


def test_damaged_newest_checkpoint_is_set_aside_and_the_previous_one_used(tiny_job_copy):
    job = tiny_job_copy
    expected = _history(job)
    truncate_files(job / "checkpoints" / "checkpoint_00000006")
    # Asking for one more step: the run must fall back to step 3 and redo 4..7.
    loop.train(
        instantiate(derive(Tiny, NUM_TRAIN_STEPS=7)(), devices=jax.devices()[:1]),
        str(job),
        "tests.Tiny",
    )
    assert os.path.isdir(job / "checkpoints_damaged" / "checkpoint_00000006")
    rows = read_metrics(job)
    assert [m["step"] for m in rows] == [1, 2, 3, 4, 5, 6, 4, 5, 6, 7]
    np.testing.assert_array_equal([m["loss"] for m in rows[6:9]], [expected[s] for s in (4, 5, 6)])
    assert _checkpoints(job) == [
        "checkpoint_00000003",
        "checkpoint_00000006",
        "checkpoint_00000007",
    ]


def test_nan_stops_by_default_naming_the_step(tmp_path):
    # An absurd learning rate: step 1's update is finite but blows the weights up, so step 2's
    # loss is not.
    explode = derive(Tiny, LEARNING_RATE=1e30, LR_SCHEDULE="constant")
    with pytest.raises(loop.NonFiniteError, match="NaN/Inf at step 2 .*no checkpoint was written"):
        loop.train(instantiate(explode(), devices=jax.devices()[:1]), str(tmp_path), "tests.Tiny")
    assert not os.path.exists(tmp_path / "checkpoints") or not _checkpoints(tmp_path)


def test_nan_skip_policy_skips_and_counts(tmp_path):
    explode = derive(Tiny, LEARNING_RATE=1e30, LR_SCHEDULE="constant", NAN_POLICY="skip")
    loop.train(instantiate(explode(), devices=jax.devices()[:1]), str(tmp_path), "tests.Tiny")
    rows = read_metrics(tmp_path)
    assert [m["skipped_steps"] for m in rows] == [0, 1, 2, 3, 4, 5]
    assert _checkpoints(tmp_path) == ["checkpoint_00000003", "checkpoint_00000006"]


@pytest.fixture
def small_disk(tmp_path):
    """A 1.5 MB tmpfs: room for one checkpoint of Tiny, not two (needs root to mount)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1536k", "tmpfs", str(mount)], capture_output=True
    ).returncode:
        pytest.skip("mounting a small tmpfs needs root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_disk_full_while_saving_stops_the_run_and_keeps_the_previous_checkpoint(small_disk):
    job = small_disk / "job"
    run = instantiate(Tiny(), devices=jax.devices()[:1])
    with pytest.raises(CheckpointError, match=r"checkpoint_00000003 is intact.*free space"):
        loop.train(run, str(job), "tests.Tiny")
    abstract, _ = state_lib.shardings(run.model, run.tx, run.mesh)
    step, state = Checkpointer(str(job), max_to_keep=3, saving=False).restore_latest(abstract)
    assert step == 3 and int(state["step"]) == 3


def _session(*args):
    """`./noxw -s ARGS` in a process group of its own, as a terminal or a scheduler starts it."""
    return subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "noxw"), *args],
        stderr=subprocess.STDOUT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **ONE_DEVICE},
        cwd=ROOT,
        start_new_session=True,
    )


def _signalled(session, pattern, send):
    """Sends `send(pid)` once a line matches `pattern`; the session's status and log, once it
    and every process of its group have ended."""
    log = []
    try:
        for line in session.stdout:
            log.append(line)
            if send is not None and re.search(pattern, line):
                send(session.pid)
                send = None
        status = session.wait(timeout=300)
        with pytest.raises(ProcessLookupError):  # nothing of the group is left running
            os.killpg(session.pid, 0)
        return status, "".join(log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(session.pid, signal.SIGKILL)


SIGNALS = [
    pytest.param(lambda pid: os.killpg(pid, signal.SIGINT), id="SIGINT-to-the-group"),
    pytest.param(lambda pid: os.kill(pid, signal.SIGINT), id="SIGINT-to-the-session"),
    pytest.param(lambda pid: os.kill(pid, signal.SIGTERM), id="SIGTERM-to-the-session"),
]


# Slow tier: each starts nox, the release env and a trainer (about 40 s); the fast
# tests/environments/test_sessions.py::test_a_signal_reaches_the_command_and_the_session_ends_with_its_status
# checks the session's side with a small command, and
# test_sigterm_saves_at_the_current_step_and_the_rerun_resumes the trainer's.
@pytest.mark.slow
@pytest.mark.parametrize("send", SIGNALS)
def test_a_signal_to_the_train_session_saves_and_the_session_exits_75(send, tmp_path):
    sets = [f"--set={a}" for a in SMALL + ["NUM_TRAIN_STEPS=500"]]
    session = _session("-s", "train", "--", f"--job_log_dir={tmp_path}", *sets)
    status, log = _signalled(session, STEP_LINE.pattern, send)
    assert status == preemption.EXIT_PREEMPTED, log[-3000:]
    saved = int(_checkpoints(tmp_path)[-1].split("_")[1])
    assert max(_history(tmp_path)) == saved < 500, log[-3000:]
    assert f"preempted: SIG{'TERM' if 'TERM' in log else 'INT'} at step {saved}" in log


@pytest.mark.slow
@pytest.mark.parametrize("send", SIGNALS)
def test_a_signal_to_the_decode_session_stops_it_with_75(send, tiny_run_dir):
    session = _session("-s", "decode", "--", f"--job_log_dir={tiny_run_dir}")
    status, log = _signalled(session, "as it was trained", send)
    assert status == preemption.EXIT_PREEMPTED, log[-3000:]
    assert re.search(r"--mode=decode_once stopped by SIG(INT|TERM); rerun", log), log[-3000:]


@pytest.fixture(scope="module")
def tiny_run_dir(pax_main, tmp_path_factory):
    """A run pax.main trained (decoding reads its experiment from config.json)."""
    job = tmp_path_factory.mktemp("decode")
    assert _run_until(pax_main, job, 2)[0] == 0
    return job


def _exit_status(script: str) -> int:
    """SCRIPT's exit status, run in a process of its own after importing pax's preemption."""
    code = "import os, signal, sys, time\nfrom pax.train import preemption\n" + script
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, "-c", code], env=env).returncode


def test_a_second_signal_while_the_first_is_handled_does_not_cut_the_exit_short():
    # The wrapper's forward may land while `interrupting` is being left: at no moment may it
    # meet Python's own SIGINT handler (KeyboardInterrupt, exit 130). Here one lands after
    # every handler change from the first signal on.
    code = (
        "change = signal.signal\n"
        "def change_then_forward(sig, handler):\n"
        "    previous = change(sig, handler)\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    return previous\n"
        "try:\n"
        "    with preemption.interrupting():\n"
        "        signal.signal = change_then_forward\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(5)\n"
        "except preemption.Interrupted:\n"
        "    sys.exit(preemption.EXIT_PREEMPTED)\n"
    )
    assert _exit_status(code) == preemption.EXIT_PREEMPTED


def test_a_second_signal_after_the_first_does_not_cut_the_exit_short():
    # Through ./noxw a terminal's ^C arrives twice: the group's, then the wrapper's forward.
    code = (
        "try:\n"
        "    with preemption.interrupting():\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(5)\n"
        "except preemption.Interrupted:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(0.2)\n"
        "    sys.exit(preemption.EXIT_PREEMPTED)\n"
    )
    assert _exit_status(code) == preemption.EXIT_PREEMPTED
