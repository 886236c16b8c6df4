"""One pinned environment per (release, platform): `.venv/pax-<version>-<platform>`.

Built from the release's lockfile alone (pax.environments.install.install_lock), so it
holds exactly the lock: no pip, no setuptools, not even pax itself (sessions put the repo on
PYTHONPATH). Its identity file (pax.envinfo: release, platform, lockfile, lock sha256, locked
versions) is written only after the env verifies, and is what the trainer's manifest and
`python -m pax env` read, however the interpreter is started. An identity naming another lock,
or none, means the env is rebuilt from scratch; an env verified against its lock on every reuse.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path

from pax import envinfo, interpreters, lockfile, paths
from pax.environments.install import install_lock, pip_check
from pax.errors import PaxError, UsageError, last_line
from pax.launch import xla_flags
from pax.pip import make_venv
from pax.releases.catalog import Release

# What envs made before the identity file carry: the lock's sha256 alone. Such an env is
# verified and given an identity instead of being rebuilt (.venv is shared by checkouts).
LEGACY_STAMP = "pax-lock.sha256"


class EnvMismatch(UsageError, RuntimeError):
    """The environment is not its lockfile (changed by hand), or cannot be made here (another
    Python, no such lock): bad input, exit 2, whose fix the one line names."""


class EnvBuildFailed(PaxError, RuntimeError):
    """Building the environment from its lock was tried and failed (an index, a hash)."""


# Differences a drift line names before `and N more` (`./noxw -s env` lists them all).
SHOWN_DIFFERENCES = 3


@dataclasses.dataclass(frozen=True)
class Env:
    release: Release
    platform: str
    path: Path
    lockfile: Path
    sha256: str
    python_version: str = (
        ""  # the release's Python this env runs (envs made here: found by _ensure)
    )

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def session_env(self, root: Path | None = None) -> dict[str, str]:
        """Variables a session exports. Not the PAX_RELEASE family: the env's identity file says
        which release it is, so a session's run records what a direct run records. The gpu env's
        add the GPU image's XLA flags with the environment's own XLA_FLAGS after them
        (pax.launch.xla_flags.with_user_flags): without them XLA leaves FP8 dots to Triton."""
        variables = {
            "PYTHONPATH": str((root or paths.ROOT).resolve()),
            "VIRTUAL_ENV": str(self.path),
            "PATH": f"{self.path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        if self.platform == "gpu":
            variables["XLA_FLAGS"] = xla_flags.with_user_flags(os.environ.get("XLA_FLAGS"))
        return variables


def env_path(release: Release, platform: str, root: Path | None = None) -> Path:
    return (root or paths.ROOT) / ".venv" / f"pax-{release.version}-{platform}"


def existing_python(release: Release, platform: str, root: Path | None = None) -> Path | None:
    """The env's python when the env is there, as it is (`nox -s env` describes a drifted env,
    where building would stop at the mismatch); None when there is none to describe."""
    path = env_path(release, platform, root)
    return path / "bin" / "python" if path.exists() else None


def identity(env: Env) -> envinfo.Identity:
    """What the env records about itself (pax.envinfo reads it)."""
    return envinfo.Identity(
        release=env.release.version,
        platform=env.platform,
        lockfile=str(env.lockfile.resolve()),
        lock_sha256=env.sha256,
        python=env.python_version or env.release.python,
        locked=lockfile.versions(lockfile.parse_lockfile(env.lockfile)),
    )


def write_identity(env: Env) -> Path:
    """Write the identity file whole or not at all (a reader never sees half of one)."""
    path = envinfo.identity_path(env.path)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(identity(env).to_json())
    os.replace(partial, path)
    return path


def _names_this_lock(env: Env) -> bool:
    """Whether the env at env.path was built from env's lock (its identity, or a legacy stamp)."""
    if not env.python.exists():
        return False
    try:
        found = envinfo.read_identity(env.path)
    except envinfo.IdentityError:
        return False
    if found is not None:
        # Not the lockfile's path: checkouts sharing one .venv see it at different paths.
        return (found.release, found.platform, found.lock_sha256) == (
            env.release.version,
            env.platform,
            env.sha256,
        )
    stamp = env.path / LEGACY_STAMP
    return stamp.is_file() and stamp.read_text().strip() == env.sha256


def verify(env: Env, log=print, just_built: bool = False) -> None:
    """Raise EnvMismatch unless installed == lock and `pip check` is clean; EnvBuildFailed, the
    env removed, for one `just_built` from the lock (the build failed, not the user)."""
    problem = mismatch(env)
    if problem and just_built:
        shutil.rmtree(env.path, ignore_errors=True)
        raise EnvBuildFailed(f"built from the lock, yet {problem}; nothing was kept")
    if problem:
        raise EnvMismatch(
            f"{problem}; remove it (rm -r {env.path}) and rerun: the session builds it again "
            "from the lock"
        )
    count = len(lockfile.parse_lockfile(env.lockfile))
    log(
        f"env {env.path.name}: {count} packages == {env.lockfile.name} "
        f"(sha256 {env.sha256[:12]}), pip check clean"
    )


def mismatch(env: Env) -> str:
    """How the env differs from its lock, or what `pip check` says, in one line; '' for none."""
    locked = lockfile.versions(lockfile.parse_lockfile(env.lockfile))
    rows = lockfile.differences(lockfile.installed_in(env.python), locked)
    if rows:
        shown = "; ".join(lockfile.difference_text(row) for row in rows[:SHOWN_DIFFERENCES])
        if len(rows) > SHOWN_DIFFERENCES:
            shown += f"; and {len(rows) - SHOWN_DIFFERENCES} more (./noxw -s env lists them)"
        return f"{env.path} does not match {env.lockfile}: {shown}"
    problems = pip_check(env.python)
    return f"pip check fails in {env.path}: {problems}" if problems else ""


@contextlib.contextmanager
def locked(path: Path):
    """Serialise sessions that build or check one env or folder (e.g. test and train at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f"{path.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def ensure(release: Release, platform: str, root: Path | None = None, log=print) -> Env:
    """Create (or reuse) and verify the env for (release, platform)."""
    with locked(env_path(release, platform, root)):
        return _ensure(release, platform, root, log)


def _lock(release: Release, platform: str) -> Path:
    """The lock an env for (release, platform) is built from here, or why it cannot be."""
    lock = release.lockfile(platform)
    if lock.is_file():
        return lock
    raise EnvMismatch(
        f"release {release.version} has no {platform} lock ({lock}); "
        f"make it with ./noxw -s lock -- {release.version} {platform}"
    )


def _ensure(release: Release, platform: str, root: Path | None, log) -> Env:
    lock = _lock(release, platform)
    path = env_path(release, platform, root)
    env = Env(release, platform, path, lock, lockfile.sha256_file(lock))
    if _names_this_lock(env):
        found = envinfo.read_identity(path)
        env = dataclasses.replace(env, python_version=found.python if found else release.python)
        verify(env, log)
        if found is None:  # made before identity files: give it one
            write_identity(env)
        return env
    version, python = interpreters.require(release.pythons, f"release {release.version}")
    env = dataclasses.replace(env, python_version=version)
    if path.exists():
        log(f"env {path.name}: lock changed or env incomplete; rebuilding")
        shutil.rmtree(path)
    started = time.monotonic()
    log(
        f"env {path.name}: creating from {lock.relative_to(release.dir.parent.parent)} "
        f"with Python {version} ({python})"
    )
    try:
        make_venv(path, python=python)
        installer = install_lock(env.python, lock) if lockfile.parse_lockfile(lock) else None
    except subprocess.CalledProcessError as err:  # a wrong hash, no network: nothing is kept
        shutil.rmtree(path, ignore_errors=True)
        why = last_line(err.stderr, err.stdout, default=f"exit {err.returncode}")
        raise EnvBuildFailed(f"cannot build {path} from {lock}: {why}") from None
    verify(env, log, just_built=True)
    write_identity(env)
    log(
        f"env {path.name}: built in {time.monotonic() - started:.1f}s ({installer or 'nothing to install'})"
    )
    return env
