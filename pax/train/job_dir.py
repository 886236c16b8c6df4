"""Whether a path can hold a job directory, asked by pax.main before anything is built or written.

A path that cannot (a file in the way, a dangling symlink, a kernel filesystem such as /proc, a
read-only filesystem, a folder this user cannot write) is a usage error naming what it is, so
the user meets one line instead of the traceback of the first checkpoint's mkdir. Standard
library only: it runs before jax is asked for anything.
"""

from __future__ import annotations

import os

from pax.errors import UsageError

# Filesystems through which the kernel shows its own state: a mkdir there fails (ENOENT on
# /proc, EPERM on /sys) or makes something that is not a folder of files (a cgroup).
KERNEL_FILESYSTEMS = frozenset({
    "proc", "sysfs", "cgroup", "cgroup2", "devpts", "debugfs", "tracefs", "securityfs",
    "pstore", "bpf", "configfs", "fusectl", "mqueue", "binfmt_misc", "efivarfs", "selinuxfs",
    "nsfs",
})  # fmt: skip
MOUNTINFO = "/proc/self/mountinfo"


def check(job_dir: str, writes: bool = True) -> None:
    """UsageError when `job_dir` cannot be a job directory: one that `writes` (train, eval) this
    user must be able to create or write; one only read (decoding) must at least be a folder on
    a filesystem of files."""
    flag = f"--job_log_dir={job_dir}"
    path = os.path.abspath(job_dir)
    while not os.path.lexists(path):  # the nearest part that is there decides
        path = os.path.dirname(path)
    if os.path.islink(path) and not os.path.exists(path):
        raise UsageError(
            f"{flag}: {path} is a symlink to {os.readlink(path)}, which does not exist; create "
            "that folder, or choose another --job_log_dir"
        )
    if not os.path.isdir(path):
        raise UsageError(f"{flag}: {path} is a file, not a directory; choose another --job_log_dir")
    mount, fstype = mount_of(path)
    if fstype in KERNEL_FILESYSTEMS:
        raise UsageError(
            f"{flag} is on {mount}, a kernel filesystem ({fstype}) that cannot hold files; pass "
            "a --job_log_dir on a writable disk"
        )
    if not writes:
        return
    # statvfs's read-only flag is what a write there would fail on with EROFS, asked without
    # writing; it holds for root too, for whom os.access would say only "not writable".
    if os.statvfs(path).f_flag & os.ST_RDONLY:
        where = f"on {mount}, " if mount else "on "
        raise UsageError(
            f"{flag} is {where}a read-only filesystem; pass a --job_log_dir on a writable disk"
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(
            f"cannot write the job directory {job_dir}: {path} is not writable by this user "
            f"(uid {os.getuid()}); make it writable by uid {os.getuid()}, or choose another "
            "--job_log_dir"
        )


def mount_of(path: str) -> tuple[str | None, str | None]:
    """(mount point, filesystem type) holding `path`; (None, None) where the kernel does not
    say (no /proc/self/mountinfo: not Linux). Read from the kernel's own table because the
    standard library has no statfs, and psutil is here only as orbax's dependency."""
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None, None
    real = os.path.realpath(path)
    best: tuple[str | None, str | None] = (None, None)
    for line in lines:
        fields = line.split()
        if "-" not in fields[6:]:
            continue
        point = _unescape(fields[4])
        fstype = fields[fields.index("-", 6) + 1]
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        # A later mount on the same point hides the earlier one, so ties go to the later line.
        if inside and len(point) >= len(best[0] or ""):
            best = (point, fstype)
    return best


def _unescape(field: str) -> str:
    r"""mountinfo writes a space, tab, newline and backslash in a path as \040, \011, \012, \134."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field
