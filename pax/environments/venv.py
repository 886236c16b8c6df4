"""One pinned environment per (release, platform): `.venv/pax-<version>-<platform>`.

Built from the release's lockfile alone (`pip install --require-hashes --no-deps`), so it
holds exactly the lock: no pip, no setuptools, not even pax itself (sessions put the repo on
PYTHONPATH). A stamp holding the lock's sha256 is written only after the env verifies; a
missing or stale stamp means the env is rebuilt from scratch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from pax.environments.pip import installed_versions, pip_env
from pax.releases import lockfile
from pax.releases.catalog import REPO_ROOT, Release

STAMP = "pax-lock.sha256"


class EnvMismatch(RuntimeError):
    """The environment does not equal its lockfile (or `pip check` complains)."""


@dataclasses.dataclass(frozen=True)
class Env:
    release: Release
    platform: str
    path: Path
    lockfile: Path
    sha256: str

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def session_env(self, root: Path | None = None) -> dict[str, str]:
        """Variables a session exports: the trainer's manifest records the first three."""
        return {
            "PAX_RELEASE": self.release.version,
            "PAX_LOCKFILE": str(self.lockfile.resolve()),
            "PAX_LOCK_SHA256": self.sha256,
            "PAX_PLATFORM": self.platform,
            "PYTHONPATH": str((root or REPO_ROOT).resolve()),
            "VIRTUAL_ENV": str(self.path),
            "PATH": f"{self.path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        }


def env_path(release: Release, platform: str, root: Path | None = None) -> Path:
    return (root or REPO_ROOT) / ".venv" / f"pax-{release.version}-{platform}"


def diff(installed: dict[str, str], locked: dict[str, str]) -> list[str]:
    """Readable differences, one line each; empty when the env equals the lock."""
    lines = []
    for name in sorted(set(installed) | set(locked)):
        have, want = installed.get(name), locked.get(name)
        if have == want:
            continue
        if have is None:
            lines.append(f"  missing     {name}=={want}  (in lock, not installed)")
        elif want is None:
            lines.append(f"  unexpected  {name}=={have}  (installed, not in lock)")
        else:
            lines.append(f"  version     {name}: installed {have}, lock {want}")
    return lines


def verify(env: Env, log=print) -> None:
    """Raise EnvMismatch unless installed == lock and `pip check` is clean."""
    locked = lockfile.versions(lockfile.parse_lockfile(env.lockfile))
    problems = diff(installed_versions(env.python), locked)
    if problems:
        raise EnvMismatch(
            f"{env.path} does not match {env.lockfile}:\n"
            + "\n".join(problems)
            + f"\nRebuild it: rm -r {env.path} (the next session recreates it)"
        )
    check = subprocess.run(_pip(env.python, "check"), capture_output=True, text=True, env=pip_env())
    if check.returncode != 0:
        raise EnvMismatch(f"pip check failed in {env.path}:\n{check.stdout}{check.stderr}")
    log(
        f"env {env.path.name}: {len(locked)} packages == {env.lockfile.name} "
        f"(sha256 {env.sha256[:12]}), pip check clean"
    )


def _pip(python: Path, *args: str) -> list[str]:
    # The tools venv's pip drives the target interpreter, so the env itself needs no pip.
    return [sys.executable, "-m", "pip", "--python", str(python), "--no-input", *args]


@contextlib.contextmanager
def _locked(path: Path):
    """Serialise sessions that build or check the same env (e.g. test and train at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f"{path.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def ensure(release: Release, platform: str, root: Path | None = None, log=print) -> Env:
    """Create (or reuse) and verify the env for (release, platform)."""
    with _locked(env_path(release, platform, root)):
        return _ensure(release, platform, root, log)


def _ensure(release: Release, platform: str, root: Path | None, log) -> Env:
    want_python = release.python
    have_python = f"{sys.version_info.major}.{sys.version_info.minor}"
    if want_python != have_python:
        raise EnvMismatch(
            f"release {release.version} is locked for Python {want_python}; "
            f"this is Python {have_python}. Run ./noxw with python{want_python}."
        )
    lock = release.lockfile(platform)
    if not lock.is_file():
        raise FileNotFoundError(
            f"release {release.version} has no {platform} lock ({lock}); "
            f"make it with ./noxw -s lock -- {release.version} {platform}"
        )
    sha = lockfile.sha256_file(lock)
    path = env_path(release, platform, root)
    env = Env(release, platform, path, lock, sha)
    stamp = path / STAMP
    if stamp.is_file() and stamp.read_text().strip() == sha and env.python.exists():
        verify(env, log)
        return env
    if path.exists():
        log(f"env {path.name}: lock changed or env incomplete; rebuilding")
        shutil.rmtree(path)
    started = time.monotonic()
    log(f"env {path.name}: creating from {lock.relative_to(release.dir.parent.parent)}")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    if lockfile.parse_lockfile(lock):
        subprocess.run(
            _pip(
                env.python, "install", "--require-hashes", "--no-deps", "--quiet", "-r", str(lock)
            ),
            check=True,
            env=pip_env(),
        )
    verify(env, log)
    stamp.write_text(sha + "\n")
    log(f"env {path.name}: built in {time.monotonic() - started:.0f}s")
    return env
