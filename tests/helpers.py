"""Shared pieces of the trainer tests: a tiny experiment and a TensorBoard event reader."""

import json
import os
import re
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from pax import envinfo, paths
from pax.tasks.lm.params.lm_cloud import LmCloudSpmdTiny

ROOT = str(paths.ROOT)

# A release other than the one the tests run on (./noxw -s test -- 1.3.0 runs them on 1.3.0), for
# the tests of a run resumed under another release.
OTHER = "1.4.0" if envinfo.describe()["release"] == "1.3.0" else "1.3.0"


def xla_flags(devices: int | None) -> str:
    """XLA_FLAGS for a process a test starts on CPU: the session's (tests/conftest.py, which
    compiles the tiny models fast) with its own count of host devices (None: the count left to
    the process, as pax.aot sets its own)."""
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", os.environ["XLA_FLAGS"])
    count = "" if devices is None else f" --xla_force_host_platform_device_count={devices}"
    return f"{flags.strip()}{count}".strip()


class ShortRun:
    """A test's run length: 6 steps, summaries every step, eval and checkpoint every 3."""

    NUM_TRAIN_STEPS = 6
    SUMMARY_EVERY_N_STEPS = 1
    EVAL_EVERY_N_STEPS = 3
    EVAL_NUM_BATCHES = 2
    CHECKPOINT_EVERY_N_STEPS = 3
    LR_WARMUP_STEPS = 2
    LR_DECAY_START = 2
    LR_DECAY_END = 50


class Tiny(ShortRun, LmCloudSpmdTiny):
    """Small enough to compile and train in seconds on CPU."""

    NUM_LAYERS = 2
    MODEL_DIMS = 64
    HIDDEN_DIMS = 128
    NUM_HEADS = 4
    SEQ_LEN = 32
    PERCORE_BATCH_SIZE = 8
    # LmCloudSpmd's own positions and init, which the model tests check; the reference run
    # turns on rotary and a Gaussian init only to learn its attention within 150 steps.
    USE_ROTARY_POSITION_EMB = False
    WEIGHT_INIT = "xavier"
    WEIGHT_INIT_SCALE = 1.000001


def derive(base, **attrs):
    return type(base.__name__, (base,), attrs)


def train(job_dir, experiment=Tiny, **flags):
    """EXPERIMENT trained (or resumed) on one device in JOB_DIR, under the name tests.Tiny."""
    import jax

    from pax.train import loop
    from pax.train.instantiate import instantiate

    run = instantiate(experiment(), devices=jax.devices()[:1])
    return loop.train(run, str(job_dir), "tests.Tiny", **flags)


def refusal(job_dir, experiment=Tiny, **flags) -> str:
    """The message of the UsageError with which `train` refuses to start."""
    import pytest

    from pax.errors import UsageError

    with pytest.raises(UsageError) as error:
        train(job_dir, experiment, **flags)
    return str(error.value)


def truncate_files(folder):
    """Every file under FOLDER cut to half its size: a checkpoint damaged on disk."""
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "r+b") as f:
                f.truncate(os.path.getsize(path) // 2)


def readme_block(start: str, end: str, page: str = "README.md") -> str:
    """PAGE's one generated block between the markers START and END."""
    from pax.releases import readme

    blocks = readme.blocks((paths.ROOT / page).read_text(), start, end)
    assert len(blocks) == 1, f"{page} needs one block between {start} and {end}"
    return blocks[0]


def read_metrics(job_dir, split="train"):
    with open(f"{job_dir}/metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    return [r for r in rows if r["split"] == split]


def read_scalars(event_file) -> dict:
    """{tag: [(step, value)]} from a TensorBoard event file (TFRecord framing, Event protos)."""
    from tensorboardX.proto import event_pb2

    scalars = {}
    with open(event_file, "rb") as f:
        while header := f.read(12):
            (length,) = struct.unpack("<Q", header[:8])
            event = event_pb2.Event.FromString(f.read(length))
            f.read(4)  # the data's masked CRC
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


# A process that has imported pax.main forks one child per command: each child is a process of
# its own (flags, devices, stdout, stderr, exit status) without importing jax, flax and orbax
# again, which is most of a short command's seconds.
_FORK_SERVER = r"""
import json, os, signal, sys
import pax.main

for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if not pid:
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        sys.argv = ["pax.main", *request["args"]]
        signal.alarm(request["timeout"])  # a command that hangs ends as SIGALRM ends it
        try:
            pax.main.run()
            status = 0
        except SystemExit as end:  # its status, as the interpreter makes one of it
            status = 0 if end.code is None else end.code
            if not isinstance(status, int):
                print(status, file=sys.stderr)
                status = 1
        # Skips the interpreter's teardown of the heap the child inherited (0.4 s of garbage
        # collection a command): it writes nothing, and an atexit handler a command's files
        # depended on would fail the test here instead of passing it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    print(pid, flush=True)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


class Command:
    """A pax.main command PaxMain.start started: `pid`, its stderr line by line as it is
    written (`lines()`), and `wait()` for its exit status."""

    def __init__(self, pid: int, stderr: Path, server):
        self.pid = pid
        self._stderr = stderr
        self._status: list[str] = []
        self._waiter = threading.Thread(target=lambda: self._status.append(server.readline()))
        self._waiter.start()

    def lines(self):
        """Its stderr's lines until it has ended."""
        with open(self._stderr) as f:
            pending = ""
            while True:
                ended = not self._waiter.is_alive()
                pending += f.read()
                *complete, pending = pending.split("\n")
                yield from (line + "\n" for line in complete)
                if ended:
                    break
                time.sleep(0.05)
        if pending:
            yield pending

    def wait(self, timeout=None) -> int:
        self._waiter.join(timeout)
        assert self._status and self._status[0], "the pax.main fork server stopped"
        return int(self._status[0])


class PaxMain:
    """`python -m pax.main ARGS` for a test: `run(*args, devices=1)` returns a
    subprocess.CompletedProcess (returncode, stdout, stderr), run in the checkout on CPU."""

    def __init__(self, folder: Path):
        self._folder = folder
        self._server = None

    def run(
        self, *args: str, devices: int = 1, cwd: str = ROOT, env: dict | None = None, timeout=300
    ) -> subprocess.CompletedProcess:
        """ENV: variables to set besides the ones the command inherits; after TIMEOUT seconds
        the command is stopped (its returncode then -14, SIGALRM)."""
        status = self.start(*args, devices=devices, cwd=cwd, env=env, timeout=timeout).wait()
        out, err = self._folder / "stdout", self._folder / "stderr"
        return subprocess.CompletedProcess(
            ["pax.main", *args], status, out.read_text(), err.read_text()
        )

    def start(
        self, *args: str, devices: int = 1, cwd: str = ROOT, env: dict | None = None, timeout=300
    ) -> Command:
        """The command started as `run` starts it, for a test that watches or signals it; one
        at a time (each command's stdout and stderr take the same two files)."""
        if self._server is None:
            inherited = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
            self._server = subprocess.Popen(
                [sys.executable, "-c", _FORK_SERVER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=inherited,
                cwd=ROOT,
            )
        out, err = self._folder / "stdout", self._folder / "stderr"
        # Emptied before the child opens them: no line of an earlier command is read as its.
        out.write_text("")
        err.write_text("")
        env = {"XLA_FLAGS": xla_flags(devices), **(env or {})}
        request = {"args": args, "env": env, "cwd": str(cwd), "timeout": timeout}
        request["stdout"] = str(out)
        self._server.stdin.write(json.dumps({**request, "stderr": str(err)}) + "\n")
        self._server.stdin.flush()
        pid = self._server.stdout.readline()
        assert pid, "the pax.main fork server stopped"
        return Command(int(pid), err, self._server.stdout)

    def close(self):
        if self._server is not None:
            self._server.stdin.close()
            self._server.wait(timeout=60)
