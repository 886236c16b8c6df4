"""Opening this host's accelerator, and who holds it when another process already does.

libtpu admits one process per host: a second one (a forgotten notebook kernel, a run still
saving) fails inside jax's backend start with a RuntimeError about libtpu's lockfile. The user
needs the holder's pid and command line, which the kernel's /proc knows: the holder keeps the
chip's device files (/dev/accel*, /dev/vfio/*) or libtpu's lockfile open.
"""

import os
from typing import Optional

import jax

from pax.errors import UsageError

LIBTPU_LOCKFILE = "/tmp/libtpu_lockfile"
# What libtpu's refusal says, across its versions (lowercased).
_HELD = ("already in use", "libtpu_lockfile", "device or resource busy")


def _is_chip_file(target: str) -> bool:
    return (
        target == LIBTPU_LOCKFILE
        or target.startswith("/dev/accel")
        or (target.startswith("/dev/vfio/") and target != "/dev/vfio/vfio")
    )


def holders(proc: str = "/proc") -> list[tuple[int, str]]:
    """(pid, command line) of every other process with the chip's files open, lowest pid first."""
    found = []
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        fd_dir = os.path.join(proc, entry, "fd")
        try:
            targets = [os.readlink(os.path.join(fd_dir, fd)) for fd in os.listdir(fd_dir)]
            with open(os.path.join(proc, entry, "cmdline"), "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or another user's
            continue
        if any(_is_chip_file(t) for t in targets):
            found.append((int(entry), cmdline))
    return sorted(found)


def held_message(error: str, proc: str = "/proc") -> Optional[str]:
    """The one line for a backend start that failed because another process holds the chip;
    None where `error` is about something else."""
    if not any(marker in error.lower() for marker in _HELD):
        return None
    found = holders(proc)
    if not found:
        return (
            "the TPU is held by another process (libtpu admits one per host) that this user "
            f"cannot see: find it with `sudo lsof -w {LIBTPU_LOCKFILE} /dev/accel* /dev/vfio/*` "
            "and stop it, or wait for it to finish"
        )
    pid, cmdline = found[0]
    what = f"pid {pid} ({cmdline[:160]})" if cmdline else f"pid {pid}"
    return (
        f"the TPU is held by {what} (libtpu admits one process per host): stop it "
        f"(`kill {pid}`; in a notebook, restart its kernel) or wait for it to finish, then rerun"
    )


def claim() -> list:
    """This process's devices (jax.devices()), starting the backend; a chip held by another
    process is a UsageError naming the holder instead of libtpu's RuntimeError."""
    try:
        return jax.devices()
    except RuntimeError as err:
        message = held_message(str(err))
        if message is None:
            raise
        raise UsageError(message) from None
