"""The CPython a release's envs run on, found without hand set-up.

A release names the Pythons its locks install on (`python` in release.toml: 1.8.0 and older
"3.11"; newer ones a list). The interpreter running nox is used when it is one of them;
otherwise the first found, in the release's order, of `pythonX.Y` on PATH, pyenv's installed
versions (the bare pyenv shim refuses a version that is not the selected one, so its version
folders are read directly), and uv's managed Pythons. Nothing is installed: a missing Python is
one line naming it and how to get it.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from pax.errors import UsageError
from pax.pip import base_python, uv_binary, uv_env


class MissingPython(UsageError):
    def __init__(self, wanted: Sequence[str], why: str):
        listed = " or ".join(wanted)
        first = wanted[0]
        super().__init__(
            f"{why} needs Python {listed}, and none was found (PATH, pyenv, uv); install one "
            f"(`uv python install {first}`, `pyenv install {first}`, or your system's "
            f"python{first} package) and rerun"
        )


def running() -> str:
    return "%d.%d" % sys.version_info[:2]


def full_version(python: str) -> str | None:
    """An interpreter's full version ("3.13.0"); None when it does not start."""
    if python == base_python():
        return platform.python_version()
    out = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() if out.returncode == 0 else None


def _version_of(python: str) -> str | None:
    full = full_version(python)
    return ".".join(full.split(".")[:2]) if full else None


def _pyenv_root() -> Path:
    return Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")


def _pyenv_candidates(version: str) -> list[str]:
    root = _pyenv_root() / "versions"
    pattern = re.compile(rf"^{re.escape(version)}\.(\d+)$")  # 3.12.1, not 3.12.1t or 3.12-dev
    found = []
    if root.is_dir():
        for folder in root.iterdir():
            match = pattern.match(folder.name)
            if match and (folder / "bin" / f"python{version}").exists():
                found.append((int(match.group(1)), str(folder / "bin" / f"python{version}")))
    return [python for _, python in sorted(found, reverse=True)]  # newest patch first


def _uv_candidate(version: str) -> list[str]:
    uv = uv_binary()
    if not uv:
        return []
    out = subprocess.run(
        [uv, "python", "find", "--no-config", "--no-python-downloads", version],
        capture_output=True,
        text=True,
        env=uv_env(),
    )
    return [out.stdout.strip()] if out.returncode == 0 and out.stdout.strip() else []


def find(version: str) -> str | None:
    """An interpreter of Python `version` ("3.12"), or None."""
    if running() == version:
        return base_python()
    on_path = shutil.which(f"python{version}") or ""
    if Path(on_path).parent == _pyenv_root() / "shims":
        on_path = ""  # pyenv's own folders are read next, without its shell scripts (seconds)
    candidates = [on_path, *_pyenv_candidates(version), *_uv_candidate(version)]
    for python in candidates:
        # A shim on PATH may exist and still refuse to start that version: ask it.
        if python and _version_of(python) == version:
            return python
    return None


def require(versions: Sequence[str], why: str) -> tuple[str, str]:
    """(version, interpreter) for the first of `versions` found, the running one first;
    MissingPython (exit 2) naming them when none is."""
    if running() in versions:
        return running(), base_python()
    for version in versions:
        python = find(version)
        if python:
            return version, python
    raise MissingPython(list(versions), why)
