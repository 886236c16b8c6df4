"""A chip held by another process: the one line that names the holder (pax.parallel.accelerator).

libtpu's refusal is simulated here by its message; the holder is a real process of this test
with a file open at the path libtpu locks, found through a /proc laid out as the kernel's.
"""

import os
import subprocess
import sys

import pytest

from pax.errors import UsageError
from pax.parallel import accelerator

pytestmark = pytest.mark.accelerator  # what a TPU host meets

# What libtpu 0.0.42.1 raised through jax on a v5e host while another process held the chip.
LIBTPU_REFUSAL = (
    "Unable to initialize backend 'tpu': ABORTED: Internal error when accessing libtpu "
    "multi-process lockfile. Run \"$ sudo rm /tmp/libtpu_lockfile\". (set JAX_PLATFORMS='' to "
    "automatically choose an available backend)"
)


@pytest.fixture
def fake_proc(tmp_path):
    """A /proc with this test's pid and one holder, pid 4242, whose fd 7 is the chip."""
    proc = tmp_path / "proc"
    holder = proc / "4242"
    (holder / "fd").mkdir(parents=True)
    (holder / "cmdline").write_bytes(b"python3\0-m\0ipykernel_launcher\0-f\0kernel.json\0")
    os.symlink("/dev/vfio/0", holder / "fd" / "7")
    os.symlink("/dev/null", holder / "fd" / "0")
    bystander = proc / "4343"
    (bystander / "fd").mkdir(parents=True)
    (bystander / "cmdline").write_bytes(b"bash\0")
    os.symlink("/dev/vfio/vfio", bystander / "fd" / "3")  # the container fd: not the chip
    (proc / "self").mkdir()
    return str(proc)


def test_the_holder_is_named_with_its_pid_and_command_line(fake_proc):
    message = accelerator.held_message(LIBTPU_REFUSAL, fake_proc)
    assert message.startswith(
        "the TPU is held by pid 4242 (python3 -m ipykernel_launcher -f kernel.json)"
    )
    assert "`kill 4242`" in message and "\n" not in message


def test_other_backend_errors_are_not_taken_for_a_held_chip(fake_proc):
    error = "Unable to initialize backend 'tpu': INTERNAL: boom"
    assert accelerator.held_message(error, fake_proc) is None


def test_a_holder_this_user_cannot_see_gets_the_command_that_finds_it(tmp_path):
    (tmp_path / "proc").mkdir()
    message = accelerator.held_message(LIBTPU_REFUSAL, str(tmp_path / "proc"))
    assert "sudo lsof -w /tmp/libtpu_lockfile" in message


_HOLD = "import sys, time; f = open(sys.argv[1], 'w'); print('ok', flush=True); time.sleep(60)"


def test_a_real_process_holding_the_lockfile_is_found(tmp_path, monkeypatch):
    """A real holder: a child process with the lockfile open, found through this machine's
    /proc (the lockfile's path is the test's own, so a TPU host's real one is left alone)."""
    lockfile = str(tmp_path / "libtpu_lockfile")
    monkeypatch.setattr(accelerator, "LIBTPU_LOCKFILE", lockfile)
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLD, lockfile], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "ok"
        found = dict(accelerator.holders())
        assert child.pid in found and "time.sleep(60)" in found[child.pid]
    finally:
        child.kill()
        child.wait()


def test_claim_turns_the_refusal_into_a_usage_error(monkeypatch):
    def refuse():
        raise RuntimeError(LIBTPU_REFUSAL)

    monkeypatch.setattr(accelerator.jax, "devices", refuse)
    monkeypatch.setattr(accelerator, "holders", lambda proc: [(4242, "python3 notebook.py")])
    with pytest.raises(UsageError, match=r"held by pid 4242"):
        accelerator.claim()
