"""pip and venv as this project runs them: an interpreter that has pip, an environment with
machine-local pip settings removed, and new venvs (`make_venv`, the one place one is made;
./noxw, which runs before pax can be imported, mirrors it for the tools venv)."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pax import paths
from pax.errors import PaxError, last_line

# Machine-local pip settings (extra indexes, find-links, constraint files) must not leak into a
# pinned install or a lock; pip's own default index (or PIP_INDEX_URL, if a user sets a mirror)
# is used, and the hashes decide what is acceptable.
_PIP_ENV_DROP = (
    "PIP_FIND_LINKS",
    "PIP_EXTRA_INDEX_URL",
    "PIP_CONSTRAINT",
    "PIP_REQUIREMENT",
    "PIP_NO_INDEX",
    "PIP_USER",
    "PIP_TARGET",
    "PIP_PREFIX",
    "PYTHONPATH",
)


class NoPip(PaxError, RuntimeError):
    """No interpreter with pip, and none can be made."""


def pip_env(base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    for key in _PIP_ENV_DROP:
        env.pop(key, None)
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def user_cache_dir(name: str, fallback_prefix: str = "pax-") -> Path:
    """`$XDG_CACHE_HOME/pax/NAME` (default ~/.cache/pax/NAME), made if need be: pax's own
    files stay out of the checkout. A home that is not ours (a container run with --user UID)
    gets a private temporary folder instead."""
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pax"
    try:
        (home / name).mkdir(parents=True, exist_ok=True)
        return home / name
    except OSError:
        return Path(tempfile.mkdtemp(prefix=fallback_prefix))


@functools.cache
def pip_python() -> str:
    """An interpreter that has pip: this one, the tools venv's, a python3 on PATH or the base
    one; else a small venv made once with the base interpreter's ensurepip (a pax image's
    runtime venv, like Debian's python3, has no pip; its base python has ensurepip)."""
    if importlib.util.find_spec("pip") is not None:
        return sys.executable
    tools = paths.TOOLS_VENV / "bin" / "python"
    if tools.exists():
        return str(tools)

    def has_pip(python) -> bool:
        return subprocess.run([python, "-c", "import pip"], capture_output=True).returncode == 0

    same = "python%d.%d" % sys.version_info[:2]  # the locks' Python: this one (see ./noxw)
    for found in (shutil.which(same), shutil.which("python3"), base_python()):
        if found and has_pip(found):
            return found
    venv = user_cache_dir("pip-venv", "pax-pip-")
    python = str(venv / "bin" / "python")
    if not (Path(python).exists() and has_pip(python)):
        try:
            make_venv(venv, with_pip=True)
        except subprocess.CalledProcessError as made:
            raise NoPip(
                "no pip found, and `python3 -m venv` cannot make one ("
                + last_line(made.stderr, made.stdout, default="ensurepip failed")
                + "): run through ./noxw, or install python3-venv"
            ) from None
    return python


@functools.cache
def pip_runner() -> str | None:
    """pip's `__pip-runner__.py`: any interpreter runs pip with it, seeing only pip on its path.

    That is what `pip --python` does after starting pip once in its own interpreter; calling
    it straight away halves the cost of each pip command in a candidate venv.
    """
    python = pip_python()
    if python == sys.executable:
        spec = importlib.util.find_spec("pip")
        where = list(spec.submodule_search_locations or []) if spec else []
        folder = where[0] if where else ""
    else:
        folder = subprocess.run(
            [python, "-c", "import os, pip; print(os.path.dirname(pip.__file__))"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    runner = Path(folder) / "__pip-runner__.py" if folder else None
    return str(runner) if runner and runner.is_file() else None


def uv_binary() -> str | None:
    """uv, pinned in requirements/tools.txt: the tools venv's (the `uv` package or its bin/), else
    one on PATH; None when there is none and pip must do the install."""
    with contextlib.suppress(ImportError, FileNotFoundError):
        import uv

        return uv.find_uv_bin()
    tools = paths.TOOLS_VENV / "bin" / "uv"
    if tools.exists():
        return str(tools)
    return shutil.which("uv")


def uv_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """pip_env's rule for uv: no machine-local indexes, links or constraints leak into an install
    (uv also reads UV_* variables and uv.toml; `--no-config` covers the files)."""
    env = pip_env(base)
    for key in [k for k in env if k.startswith("UV_") and k != "UV_CACHE_DIR"]:
        env.pop(key)
    if env.get("PIP_INDEX_URL"):  # a user's mirror is honoured by both installers
        env["UV_INDEX_URL"] = env["PIP_INDEX_URL"]
    return env


def base_python() -> str:
    """The interpreter new venvs are made from (the real one under any venv)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def make_venv(path: Path, with_pip: bool = False, python: str | None = None) -> Path:
    """A new venv at path (anything there is removed first) from `python` (base_python() by
    default); returns its python. Without pip by default: a pip from outside drives it (`pip --python`, uv), so it
    holds exactly what is installed into it. Nothing is left behind when it fails
    (subprocess.CalledProcessError, with the output)."""
    path = Path(path)
    shutil.rmtree(path, ignore_errors=True)
    command = [
        python or base_python(),
        "-m",
        "venv",
        *([] if with_pip else ["--without-pip"]),
        str(path),
    ]
    try:
        subprocess.run(command, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path / "bin" / "python"
