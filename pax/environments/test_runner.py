"""pytest-xdist beside a release env, so `./noxw -s test` spreads test files over the cores.

Compiling a test's programs keeps one core busy and leaves the others idle, so workers are
what makes the suite fast. The plugin is locked on its own (requirements/test-runner.txt, no
dependencies: pytest is the release's) and installed into `.venv/pax-<release>-cpu.test-runner`,
put on the test session's PYTHONPATH: the release env itself stays exactly its lock.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from pax import lockfile
from pax.environments.venv import Env
from pax.pip import pip_env, pip_python, uv_binary, uv_env
from pax.releases.catalog import REPO_ROOT

LOCK = REPO_ROOT / "requirements" / "test-runner.txt"
STAMP = "test-runner-lock.sha256"
MAX_WORKERS = 4  # each worker holds its own jax, compilation and shared tiny run


def path(env: Env) -> Path:
    return env.path.with_name(env.path.name + ".test-runner")


def ensure(env: Env, log=print) -> Path:
    """The plugin folder for `env`, (re)installed when its lock changed; whole or absent."""
    target = path(env)
    sha = lockfile.sha256_file(LOCK)
    if (target / STAMP).is_file() and (target / STAMP).read_text().strip() == sha:
        return target
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    args = ["--target", str(partial), "--no-deps", "--require-hashes", "-r", str(LOCK)]
    uv = uv_binary()
    if uv:
        command = [uv, "pip", "install", "--no-config", "--quiet", "--python", str(env.python)]
        subprocess.run(command + args, check=True, env=uv_env())
    else:
        command = [pip_python(), "-m", "pip", "--python", str(env.python), "install", "--quiet"]
        subprocess.run(command + args, check=True, env=pip_env())
    (partial / STAMP).write_text(sha + "\n")
    shutil.rmtree(target, ignore_errors=True)
    os.replace(partial, target)
    log(f"test runner: {', '.join(sorted(lockfile.versions(lockfile.parse_lockfile(LOCK))))}")
    return target


def session_env(env: Env, runner: Path) -> dict[str, str]:
    """The release env's session variables with the plugin folder after the checkout."""
    variables = env.session_env()
    variables["PYTHONPATH"] = f"{variables['PYTHONPATH']}{os.pathsep}{runner}"
    return variables


def pytest_args(args: list[str], cores: int | None = None) -> list[str]:
    """Workers for the test files (`-n N --dist loadfile`: a file's tests share one worker, so
    its module fixtures are built once), unless the caller chose (`-n`, `-p no:xdist`, `--pdb`)
    or there is one core."""
    cores = cores or len(os.sched_getaffinity(0))
    chosen = any(a.startswith(("-n", "--numprocesses", "--dist", "--pdb")) for a in args)
    if chosen or "no:xdist" in args or cores < 2:
        return []
    return ["-n", str(min(cores, MAX_WORKERS)), "--dist", "loadfile"]
