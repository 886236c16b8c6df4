"""The one way this project runs git: the trainer's manifest, image labels, release cuts and
lock diffs all ask through here. Standard library only, so every layer may import it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pax import paths
from pax.errors import PaxError, last_line


class GitError(PaxError, RuntimeError):
    """git is missing or refused; the message is git's last line."""


def run(*args: str, root: Path | str | None = None, timeout: float = 60) -> str:
    """stdout of `git ARGS` in `root` (default: this checkout); GitError when it fails."""
    try:
        proc = subprocess.run(
            ["git", *args], cwd=root or paths.ROOT, capture_output=True, text=True, timeout=timeout
        )
    except FileNotFoundError:
        raise GitError("git is not installed") from None
    except (OSError, subprocess.SubprocessError) as err:
        raise GitError(f"git {args[0]}: {err}") from None
    if proc.returncode != 0:
        raise GitError(
            last_line(proc.stderr, proc.stdout, default=f"git {args[0]} exited {proc.returncode}")
        )
    return proc.stdout


def revision(root: Path | str | None = None) -> str | None:
    """HEAD's sha, with `-dirty` when tracked files changed; None outside a git checkout."""
    try:
        head = run("rev-parse", "HEAD", root=root).strip()
        dirty = run("status", "--porcelain", "--untracked-files=no", root=root).strip()
    except GitError:
        return None
    return head + ("-dirty" if dirty else "")


def blob(rev: str, path: str, root: Path | str | None = None) -> bytes:
    """The bytes of `path` in commit `rev` (no newline translation); GitError when absent."""
    try:
        proc = subprocess.run(
            ["git", "cat-file", "blob", f"{rev}:{path}"],
            cwd=root or paths.ROOT,
            capture_output=True,
        )
    except FileNotFoundError:
        raise GitError("git is not installed") from None
    if proc.returncode != 0:
        raise GitError(last_line(proc.stderr, default=f"git cat-file exited {proc.returncode}"))
    return proc.stdout
