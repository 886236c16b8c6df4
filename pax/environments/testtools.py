"""The test tools beside a release's cpu env: `.venv/pax-<release>-cpu.test-runner`, put on the
test and tutorial sessions' PYTHONPATH after the checkout, so the env itself stays exactly its lock.

A release with a test lock (releases/<v>/test.txt: pytest, pytest-xdist, the notebook tools,
compiled against the release's cpu lock) gets the packages that lock adds to the cpu lock; those
both name are the env's own, and must be at the same versions (checked before anything is
installed). An older release's cpu lock holds the tools itself, and only pytest-xdist comes from
requirements/test-runner.txt (no dependencies: pytest is the release's).

Compiling a test's programs keeps one core busy and leaves the others idle, so xdist's workers
are what makes the suite fast.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from pax import lockfile
from pax.environments.install import install_into_folder, requirement_line
from pax.environments.venv import Env, locked
from pax.errors import PaxError
from pax.paths import ROOT

LOCK = ROOT / "requirements" / "test-runner.txt"  # releases without a test lock
STAMP = "test-runner-lock.sha256"
INSTALLED = "test-runner.txt"  # what the folder holds, as the hashed requirements installed
MAX_WORKERS = 4  # each worker holds its own jax, compilation and shared tiny run
# `jupyter-execute` as the env's python runs it: its script lies in the env (older releases) or
# in the tools folder, whose scripts name the env's python by absolute path.
JUPYTER_EXECUTE = ("-c", "import sys; from nbclient.cli import main; sys.exit(main())")
CHECKOUT_PACKAGES = ("pax", "benchmarks", "tests")  # imported from the source tree, not an env


class ToolsError(PaxError, RuntimeError):
    """The test tools could not be installed beside the env."""


def path(env: Env) -> Path:
    return env.path.with_name(env.path.name + ".test-runner")


def requirements(env: Env) -> str:
    """The hashed requirements the folder beside `env` holds: the test lock less what the cpu
    lock pins (TestLockMismatch where the two disagree), or the xdist lock for older releases."""
    if env.release.test_lock is None:
        return LOCK.read_text()
    env.release.check_test_lock()
    product = lockfile.versions(lockfile.parse_lockfile(env.lockfile))
    tools = lockfile.parse_lockfile(env.release.test_lock)
    lines = [f"# releases/{env.release.dir.name}/test.txt less what cpu.txt pins"]
    lines += [requirement_line(pin) for name, pin in sorted(tools.items()) if name not in product]
    return "\n".join(lines) + "\n"


def ensure(env: Env, log=print, install=install_into_folder) -> Path:
    """The tools folder for `env`, (re)installed when what it should hold changed; whole or absent:
    it is filled under another name and renamed, so a killed install leaves no half folder."""
    target = path(env)
    with locked(target):
        text = requirements(env)
        sha = hashlib.sha256(text.encode()).hexdigest()
        if (target / STAMP).is_file() and (target / STAMP).read_text().strip() == sha:
            return target
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        (partial / INSTALLED).write_text(text)
        if lockfile.parse_lockfile_text(text):
            try:
                install(env.python, partial / INSTALLED, partial)
            except subprocess.CalledProcessError as err:
                raise ToolsError(f"installing the test tools beside {env.path.name} failed: {err}")
        (partial / STAMP).write_text(sha + "\n")
        shutil.rmtree(target, ignore_errors=True)
        os.replace(partial, target)
    names = sorted(lockfile.versions(lockfile.parse_lockfile_text(text)))
    log(f"test runner: {len(names)} packages beside {env.path.name}: {', '.join(names)}")
    return target


def prepare(env: Env, log=print) -> dict[str, str]:
    """The session variables of `env` with its test tools beside it: TestLockMismatch or
    ToolsError (both RuntimeErrors, one line each) where that cannot be."""
    return session_env(env, ensure(env, log))


def compile_checkout(pythons, root: Path = ROOT) -> None:
    """Bytecode of the checkout's packages for each interpreter given (the env's, and nox's own
    for the `./noxw` commands tests start), as the envs' packages get theirs at install: where
    PYTHONDONTWRITEBYTECODE is set, each of the hundreds of processes the tier starts would
    otherwise compile pax again (a third of a `./noxw` command's start). compileall writes only
    what changed; a file that does not compile is left for the tests to report."""
    for python in dict.fromkeys(map(str, pythons)):
        command = [python, "-m", "compileall", "-q", "-j", "0", *CHECKOUT_PACKAGES]
        subprocess.run(command, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def session_env(env: Env, runner: Path) -> dict[str, str]:
    """The release env's session variables with the tools folder after the checkout."""
    variables = env.session_env()
    variables["PYTHONPATH"] = f"{variables['PYTHONPATH']}{os.pathsep}{runner}"
    return variables


def pytest_argv(args: list[str], platform: str = "cpu", cores: int | None = None) -> list[str]:
    """pytest's arguments for `./noxw -s test -- [RELEASE] [PLATFORM] ARGS`: on a TPU or GPU the
    accelerator tier alone, in one process (it holds the chip; the tier selects itself by its
    marker); the tests folder unless ARGS name a file, folder or test; workers by pytest_args."""
    if platform != "cpu":
        args = ["-m", "accelerator", "--full", "-p", "no:xdist", *args]
    targets = [] if any(Path(a.split("::")[0]).exists() for a in args) else ["tests"]
    return [*targets, *pytest_args(args, cores), *args]


def pytest_args(args: list[str], cores: int | None = None) -> list[str]:
    """Workers for the test files (`-n N --dist loadfile`: a file's tests share one worker, so
    its module fixtures are built once), unless the caller chose (`-n`, `-p no:xdist`, `--pdb`)
    or there is one core."""
    cores = cores or len(os.sched_getaffinity(0))
    chosen = any(a.startswith(("-n", "--numprocesses", "--dist", "--pdb")) for a in args)
    if chosen or "no:xdist" in args or cores < 2:
        return []
    return ["-n", str(min(cores, MAX_WORKERS)), "--dist", "loadfile"]
