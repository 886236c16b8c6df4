"""Compile a release's lockfiles: requirements/<platform>.in + the release's pins -> releases/<v>/<platform>.txt,
and requirements/test.in constrained by the release's cpu lock -> releases/<v>/test.txt."""

from __future__ import annotations

import concurrent.futures
import datetime as _dt
import subprocess
import sys
import threading
import time
from pathlib import Path

from pax import interpreters, lockfile, paths
from pax.errors import PaxError, UsageError
from pax.pip import make_venv, pip_env, uv_binary, uv_env
from pax.releases.catalog import (
    CUT_PYTHONS,
    LOCKS,
    NIGHTLY,
    PYTHON,
    TEST_LOCK,
    Release,
    load,
    resolve,
)

PIP_COMPILE_FLAGS = (
    "--generate-hashes",
    "--allow-unsafe",
    "--strip-extras",
    "--no-emit-index-url",
    "--no-emit-find-links",
    "--no-emit-trusted-host",
    "--quiet",
)


class LockError(PaxError, RuntimeError):
    """A lock that could not be compiled, or does not honour the release's pins."""


def write_constraints(release: Release) -> Path:
    """release.toml's [versions] as a pip constraints file (committed, so locks cite a stable path)."""
    lines = [
        f"# Headline pins of release {release.version}, generated from release.toml [versions].",
        "# Edit release.toml, then ./noxw -s lock -- " + release.version,
    ]
    lines += [f"{name}=={version}" for name, version in sorted(release.pins.items())]
    text = "\n".join(lines) + "\n"
    path = release.constraints_file
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def lock_python(release: Release, root: Path, log=print) -> str:
    """An interpreter with pip-tools of the release's own Python: pip-compile resolves for the
    Python it runs on (markers, wheels' tags, requires-python), and has no flag to aim at
    another. The running one when it is that Python; else a venv beside the tools venv,
    `.tools/venv-<python>`, with the tools lock installed (hash-checked) into it."""
    if interpreters.running() == release.python:
        return sys.executable
    with _LOCK_PYTHON:  # the platforms compile in parallel threads: one venv made, once
        return _lock_venv(release, root, log)


_LOCK_PYTHON = threading.Lock()


def _lock_venv(release: Release, root: Path, log) -> str:
    _, base = interpreters.require([release.python], f"locking release {release.version}")
    venv = root / ".tools" / f"venv-{release.python}"
    python = venv / "bin" / "python"
    tools = root / "requirements" / "tools.txt"
    stamp = venv / "tools-lock.sha256"
    sha = lockfile.sha256_file(tools)
    if python.exists() and stamp.is_file() and stamp.read_text().strip() == sha:
        return str(python)
    log(f"locking with Python {release.python}: installing {tools.name} into {venv}")
    make_venv(venv, python=base)
    uv = [uv_binary() or "uv", "pip", "install", "--no-config", "--python", str(python)]
    subprocess.run(
        [*uv, "--quiet", "--require-hashes", "--no-deps", "-r", str(tools)],
        env=uv_env(),
        check=True,
    )
    stamp.write_text(sha + "\n")
    return str(python)


def compile_command(release: Release, platform: str, root: Path, python: str) -> list[str]:
    out = release.lockfile(platform).relative_to(root)
    cmd = [
        python,
        "-m",
        "pax.releases.pip_compile",
        *PIP_COMPILE_FLAGS,
        # pip-tools keeps a dependency cache per directory: one per platform so compiles can run in parallel
        "--cache-dir",
        str(Path.home() / ".cache" / "pax-lock" / platform),
        "-o",
        str(out),
    ]
    if release.pins:
        cmd += ["-c", str(release.constraints_file.relative_to(root))]
    if platform == TEST_LOCK:
        # The test tools run beside the cpu env and import its packages: the ones both name
        # are pinned to the cpu lock's versions, so the product lock alone decides them.
        cmd += ["-c", str(release.lockfile("cpu").relative_to(root))]
    # fast-deps reads each wheel's metadata with HTTP range requests: this index publishes no
    # separate metadata files (PEP 658), and without it pip downloads every wheel it considers
    # (~3 GB of CUDA wheels for the gpu lock); hashes come from the index links (pip_compile.py).
    pip_args = ["--use-feature=fast-deps"]
    if release.resolved_before:
        pip_args.append(f"--uploaded-prior-to={release.resolved_before}")
    cmd += ["--pip-args", " ".join(pip_args)]
    cmd.append(requirements_in(release, platform))
    return cmd


def requirements_in(release: Release, platform: str) -> str:
    """The input a lock is compiled from. GPU locks moved to CUDA 13 with the releases on Python
    3.12 (jax 0.11 and later); the ones on 3.11 keep CUDA 12, so relocking them gives their
    files back unchanged."""
    if platform == "gpu" and release.python == "3.11":
        return "requirements/gpu-cuda12.in"
    return f"requirements/{platform}.in"


def compile_one(release: Release, platform: str, root: Path) -> tuple[str, float, str]:
    lock = release.lockfile(platform)
    before = lockfile.sha256_file(lock) if lock.is_file() else None
    env = pip_env()
    env["CUSTOM_COMPILE_COMMAND"] = f"./noxw -s lock -- {release.version} {platform}"
    env["PYTHONPATH"] = str(root)  # for pax.releases.pip_compile
    started = time.monotonic()
    command = compile_command(release, platform, root, lock_python(release, root))
    proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    took = time.monotonic() - started
    if proc.returncode != 0:
        raise LockError(f"pip-compile {release.version} {platform} failed:\n{proc.stderr[-4000:]}")
    after = lockfile.sha256_file(lock)
    state = "new" if before is None else ("unchanged" if before == after else "CHANGED")
    return after, took, state


def record_shas(release: Release, shas: dict[str, str]) -> None:
    """Rewrite release.toml's [locks] table, which by convention is the file's last table."""
    path = release.dir / "release.toml"
    known = dict(release.meta.get("locks", {}))
    known.update(shas)
    head = path.read_text().split("\n[locks]")[0].rstrip("\n")
    lines = [head, "", "[locks]  # sha256 of each lockfile; frozen once the release is cut"]
    lines += [f'{p} = "{known[p]}"' for p in LOCKS if p in known]
    path.write_text("\n".join(lines) + "\n")


def make_nightly(root: Path) -> Release:
    directory = paths.releases_dir(root) / NIGHTLY
    directory.mkdir(parents=True, exist_ok=True)
    today = _dt.date.today().isoformat()
    (directory / "release.toml").write_text(
        f'version = "{NIGHTLY}"\ndate = {today}\npython = {list(CUT_PYTHONS)}\n'
        f'notes = "Newest of everything on {today}; not a release (git-ignored)."\n'
    )
    return load(directory)


def lock(
    release: Release,
    platforms: list[str] | None = None,
    root: Path | None = None,
    log=print,
    compile=compile_one,
) -> dict[str, str]:
    """Compile the release's locks (the platforms in parallel, then the test lock, which the cpu
    lock constrains), record their sha256, check the headline pins and the test lock's agreement.

    `compile(release, platform, root) -> (sha256, seconds, state)` writes one lockfile; tests
    pass a fake one (pax.releases.cut's tests) so no index is needed.
    """
    root = root or paths.ROOT
    names = list(platforms or LOCKS)
    products = [p for p in names if p != TEST_LOCK]
    if release.pins:
        write_constraints(release)
    log(
        f"locking {release.version} for {', '.join(names)}"
        + (f" (index as of {release.resolved_before})" if release.resolved_before else "")
    )
    if TEST_LOCK in names and "cpu" not in products and not release.lockfile("cpu").is_file():
        raise LockError(
            f"the test lock is constrained by the cpu lock, which {release.version} lacks; "
            f"lock both: ./noxw -s lock -- {release.version} cpu test"
        )
    shas = {}

    def record(name: str, result: tuple[str, float, str]) -> None:
        sha, took, state = result
        shas[name] = sha
        log(f"  {name}.txt  {state:9s} {took:5.0f}s  sha256 {sha}")

    if products:
        with concurrent.futures.ThreadPoolExecutor(len(products)) as pool:
            futures = {p: pool.submit(compile, release, p, root) for p in products}
            for platform, future in futures.items():
                record(platform, future.result())
    if TEST_LOCK in names:
        record(TEST_LOCK, compile(release, TEST_LOCK, root))
    record_shas(release, shas)
    if products:
        headline = lockfile.versions(lockfile.parse_lockfile(release.lockfile(products[0])))
        for name, want in release.pins.items():
            if headline.get(name) != want:
                raise LockError(
                    f"{products[0]} lock has {name}=={headline.get(name)}, pin says {want}"
                )
    if TEST_LOCK in names:
        release.check_test_lock()
    return shas


class LockUsage(UsageError, ValueError):
    """`lock` arguments that name nothing to lock."""


def lock_from_args(args: list[str], root: Path | None = None, log=print) -> None:
    """`./noxw -s lock -- RELEASE|nightly|tools [PLATFORM...]`: LockUsage for bad arguments,
    UnknownRelease, LockError for a failed compile or a pin the lock does not honour."""
    root = root or paths.ROOT
    if not args:
        raise LockUsage(
            "name a release, e.g. `./noxw -s lock -- 1.4.0 [cpu tpu gpu test]`, "
            "`-- nightly` or `-- tools`"
        )
    name, platforms = args[0], list(args[1:])
    if name == "tools":
        lock_tools(root, log=log)
        return
    bad = [p for p in platforms if p not in LOCKS]
    if bad:
        raise LockUsage(f"unknown lock(s) {' '.join(bad)}; locks: {', '.join(LOCKS)}")
    # The word is the release itself, never optional: one that is none (``, a typo) is refused,
    # as diff and bisect refuse it, instead of meaning the newest.
    release = make_nightly(root) if name == NIGHTLY else resolve(name, root)
    lock(release, platforms or None, root, log=log)


def lock_tools(root: Path | None = None, log=print) -> str:
    """Recompile requirements/tools.txt (the tools venv ./noxw installs)."""
    root = root or paths.ROOT
    env = pip_env()
    env["CUSTOM_COMPILE_COMMAND"] = "./noxw -s lock -- tools"
    env["PYTHONPATH"] = str(root)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pax.releases.pip_compile",
            *PIP_COMPILE_FLAGS,
            "--pip-args",
            "--use-feature=fast-deps",
            "-o",
            "requirements/tools.txt",
            "requirements/tools.in",
        ],
        cwd=root,
        env=env,
        check=True,
    )
    sha = lockfile.sha256_file(root / "requirements" / "tools.txt")
    log(f"requirements/tools.txt sha256 {sha}")
    lock_test_runner(root, log)
    return sha


def lock_test_runner(root: Path, log=print) -> None:
    """Recompile requirements/test-runner.txt: pytest-xdist laid beside the env of a release
    without a test lock. `--no-deps` (uv's; pip-compile has none): pytest is the release's."""
    subprocess.run(
        [uv_binary() or "uv", "pip", "compile", "--no-config", "--no-deps", "--generate-hashes"]
        + ["--python-version", PYTHON, "--quiet", "--custom-compile-command"]
        + ["./noxw -s lock -- tools", "-o", "requirements/test-runner.txt"]
        + ["requirements/test-runner.in"],
        cwd=root,
        env=uv_env(),
        check=True,
    )
    sha = lockfile.sha256_file(root / "requirements" / "test-runner.txt")
    log(f"requirements/test-runner.txt sha256 {sha}")
