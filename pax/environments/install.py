"""Putting pinned packages somewhere: the one place uv or pip is chosen and driven, wheels are
downloaded or built, and a pin becomes a hashed requirement line.

uv where the tools venv has it (seconds, where pip takes most of a minute); pip otherwise, e.g.
in an image's runtime venv. Either drives the target interpreter's environment from outside, so
the target needs no pip of its own. Pins with hashes are installed and downloaded
`--require-hashes`: a file whose sha256 the lock does not list is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import tempfile
from pathlib import Path

from pax.errors import PaxError
from pax.lockfile import Pin
from pax.pip import pip_env, pip_python, pip_runner, uv_binary, uv_env


def requirement_line(pin: Pin) -> str:
    """`name==version --hash=...`: the pin as pip and uv read it."""
    return " ".join([f"{pin.name}=={pin.version}", *(f"--hash={h}" for h in pin.hashes)])


@contextlib.contextmanager
def requirements_file(pins: list[Pin], hashed: bool = True):
    """A temporary requirements file of `pins` (`name==version` alone unless `hashed`)."""
    lines = [requirement_line(p) if hashed else f"{p.name}=={p.version}" for p in pins]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
        req.write("\n".join(lines) + "\n")
    try:
        yield Path(req.name)
    finally:
        Path(req.name).unlink()


class InstallError(PaxError, RuntimeError):
    """An installer that cannot run here."""


@dataclasses.dataclass(frozen=True)
class Installer:
    """uv (`uv` is its binary) or pip (`uv` None), driving another interpreter's environment."""

    uv: str | None

    @classmethod
    def choose(cls, want: str = "auto") -> Installer:
        """uv where there is one and `want` ("auto", "uv" or "pip") allows it, else pip."""
        uv = uv_binary() if want in ("auto", "uv") else None
        if want == "uv" and not uv:
            raise InstallError(
                "--installer uv: uv is not installed (run through ./noxw, or use pip)"
            )
        return cls(uv)

    @property
    def name(self) -> str:
        return "uv" if self.uv else "pip"

    def command(self, python: Path, verb: str, *args: str) -> list[str]:
        """`pip VERB ARGS` for python's environment, as uv's pip interface or pip itself."""
        if self.uv:
            rest = [a for a in args if a != "-y"]  # uv pip uninstall never asks
            return [self.uv, "pip", verb, "--no-config", "--python", str(python), *rest]
        runner = pip_runner()
        if runner:  # what `pip --python` runs, without starting pip twice
            return [str(python), runner, "--no-input", verb, *args]
        return [pip_python(), "-m", "pip", "--python", str(python), "--no-input", verb, *args]

    def run(self, python: Path, verb: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
        command = self.command(python, verb, *args)
        env = uv_env() if command[0] == self.uv else pip_env()
        return subprocess.run(command, env=env, **kwargs)


def pip_check(python: Path, installer: Installer | None = None) -> str:
    """What `pip check` finds wrong in python's environment, one line per problem; "" when
    every installed requirement is met. uv's check where uv installs (milliseconds, against
    pip's half second of start-up: bisect checks every env it builds), pip's otherwise."""
    installer = installer or Installer.choose()
    check = installer.run(python, "check", capture_output=True, text=True)
    if check.returncode == 0:
        return ""
    # uv frames its report with the environment it read and a count of what it checked.
    framing = ("Using Python ", "Checked ")
    said = (check.stdout + check.stderr).splitlines()
    lines = [x.strip() for x in said if x.strip() and not x.startswith(framing)][:5]
    return "; ".join(lines) or f"{installer.name} check failed (exit {check.returncode})"


# uv leaves bytecode to the first import, which writes none where PYTHONDONTWRITEBYTECODE is set:
# then every process compiles jax again (4 s of a 6 s `import jax`), and the tests start
# hundreds. pip compiles at install by default.
COMPILE_BYTECODE = ("--compile-bytecode",)


def install_lock(python: Path, lock: Path) -> str:
    """Install exactly a hashed lock into python's environment; returns the installer used.
    uv's `pip sync` also removes anything else; pip installs into the new, empty venvs this is
    given. subprocess.CalledProcessError when it fails (a wrong hash: nothing installed)."""
    installer = Installer.choose()
    if installer.uv:
        args = ("--require-hashes", "--quiet", *COMPILE_BYTECODE, str(lock))
        installer.run(python, "sync", *args, check=True)
    else:
        args = ("--require-hashes", "--no-deps", "--quiet", "-r", str(lock))
        installer.run(python, "install", *args, check=True)
    return installer.name


def install_into_folder(python: Path, requirements: Path, target: Path) -> str:
    """Hashed requirements, without dependencies, into the folder `target` for python (which
    imports them with the folder on its path); returns the installer used."""
    installer = Installer.choose()
    args = ("--quiet", "--target", str(target), "--no-deps", "--require-hashes")
    args += COMPILE_BYTECODE if installer.uv else ()
    installer.run(python, "install", *args, "-r", str(requirements), check=True)
    return installer.name


def install_from_folder(
    installer: Installer, python: Path, pins: list[Pin], wheels: Path
) -> subprocess.CompletedProcess:
    """`pins` from the folder `wheels` alone (no index), without dependencies, hash-checked where
    every pin has hashes; the finished process, output captured."""
    local = ("--no-deps", "--no-compile", "--no-index", "--find-links", str(wheels))
    hashes = ["--require-hashes"] if all(p.hashes for p in pins) else []
    with requirements_file(pins) as req:
        args = (*local, *hashes, "-r", str(req))
        return installer.run(python, "install", *args, capture_output=True, text=True)


def download(
    requirements: Path, dest: Path, *options: str, require_hashes: bool = True
) -> subprocess.CompletedProcess:
    """`pip download` of the requirements' wheels (never an sdist, no dependencies) into dest,
    with pip's `options` (index, target platform); the finished process, output captured."""
    command = [pip_python(), "-m", "pip", "download", "--no-input", "--quiet", "--no-deps"]
    command += ["--only-binary", ":all:", *(["--require-hashes"] if require_hashes else [])]
    command += [*options, "-d", str(dest), "-r", str(requirements)]
    return subprocess.run(command, capture_output=True, text=True, env=pip_env())


def build_wheel(
    source: Path, dest: Path, python: str | Path, isolated: bool = True, env: dict | None = None
) -> subprocess.CompletedProcess:
    """`pip wheel` of the project at source (no dependencies) into dest by PYTHON's pip, in an
    isolated build environment unless told not to; `env` adds variables (SOURCE_DATE_EPOCH).
    The finished process, output captured."""
    command = [str(python), "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dest), str(source)]
    command += [] if isolated else ["--no-build-isolation"]
    return subprocess.run(command, env={**pip_env(), **(env or {})}, capture_output=True, text=True)
