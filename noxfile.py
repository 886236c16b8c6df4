"""Pax's sessions, run through the wrapper: `./noxw -s test`, `./noxw -s train -- 1.7.0 cpu`.

Sessions that run the trainer share one pinned env per (release, platform), exactly its lock
(pax.environments.venv); RELEASE defaults to the newest cut release, PLATFORM to cpu. Sessions
only call functions of the packages, which run here in the tools venv (they import no jax).
Every session exits with its command's own status, its failure said in one line
(pax.environments.sessions; docs/troubleshooting.md#exit-status)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

# the packages below, run here in the tools venv
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchmarks import table as bench_table
from pax.bisect import cli as bisect_cli
from pax.curves import band as refs
from pax.docs import blocks as doc_blocks
from pax.environments import job_flags, sessions, testtools, venv
from pax.images import cli as images_cli
from pax.launch import cli as launch
from pax.paths import ROOT
from pax.releases import catalog
from pax.releases import cli as releases_cli
from pax.releases import compile as locks

nox.options.sessions = ["test"]
# Every session runs in a venv this project makes itself (the tools venv, a pinned release env).
nox.options.default_venv_backend = "none"


def _errors(session: nox.Session):
    """A package's error (PaxError) ends the session with its one line and its own status:
    `SESSION: error: MESSAGE`, as the packages' own commands print theirs."""
    return sessions.one_line(session.name)


def _release(session: nox.Session, args: list[str], platform=True) -> tuple[catalog.Release, str]:
    """[RELEASE] [PLATFORM] popped off args; PLATFORM is cpu where the session takes none."""
    with _errors(session):
        if platform:
            return catalog.pop_release_and_platform(args)
        return catalog.pop_release(args), "cpu"


def _env(session: nox.Session, release: catalog.Release, platform: str) -> venv.Env:
    with _errors(session):
        return venv.ensure(release, platform, log=session.log)


def _in_env(session: nox.Session, module: str, defaults=None, platform=True, or_args=()) -> list:
    """`python -m module ARGS` in a release's env; posargs: [RELEASE] [PLATFORM] ARGS."""
    args = list(session.posargs)
    release, platform = _release(session, args, platform)
    env = _env(session, release, platform)
    args = job_flags.with_defaults(args, defaults) if defaults else args or list(or_args)
    sessions.run([env.python, "-m", module, *args], env.session_env(), log=session.log)
    return args


@nox.session
def test(session: nox.Session) -> None:
    """This checkout's tests on a release's pins: `test -- [RELEASE] [PLATFORM] [--full] [ARGS]`.

    On a TPU or GPU host, PLATFORM tpu|gpu runs the accelerator tier in that env, one process."""
    args = list(session.posargs)
    release, platform = _release(session, args)
    env = _env(session, release, platform)
    with _errors(session):
        variables = testtools.prepare(env, log=session.log)
    testtools.compile_checkout([env.python, sys.executable])
    # Tests choose their own devices (conftest sets XLA_FLAGS before jax loads).
    argv = testtools.pytest_argv(args, platform)
    sessions.run([env.python, "-m", "pytest", *argv], variables, log=session.log)


@nox.session
def train(session: nox.Session) -> None:
    """Train the tiny LM: `train -- [RELEASE] [PLATFORM] [--exp=... --job_log_dir=... ...]`."""
    for line in job_flags.job_report(_in_env(session, "pax.main", job_flags.TINY), ROOT):
        session.log(line)


@nox.session
def decode(session: nox.Session) -> None:
    """Text from a run's newest checkpoint: `decode -- [RELEASE] [PLATFORM] [--job_log_dir=D]`.

    runs/tiny by default, decoded as it was trained (its config.json's experiment and --set
    values); pax.main's decoding flags follow (`--prompt=T`, docs/decoding.md)."""
    _in_env(session, "pax.main", job_flags.DECODE)


@nox.session
def env(session: nox.Session) -> None:
    """A release env's identity and drift, as a run started by hand sees it: `env -- [R] [P] [--json]`."""
    args = list(session.posargs)
    release, platform = _release(session, args)
    python = venv.existing_python(release, platform) or _env(session, release, platform).python
    sessions.run([python, "-m", "pax", "env", *args], {"PYTHONPATH": str(ROOT)}, log=session.log)


@nox.session
def lock(session: nox.Session) -> None:
    """Recompile lockfiles: `lock -- RELEASE|nightly|tools [PLATFORM...]`."""
    with _errors(session):
        locks.lock_from_args(list(session.posargs), ROOT, log=session.log)


def _image_session(command: str, description: str, usage: str) -> None:
    """`./noxw -s COMMAND -- ...`: pax.images' COMMAND, a usage error the session's one line."""

    def run(session: nox.Session) -> None:
        with _errors(session):
            session.log(f"{command}: {images_cli.run_command(command, session.posargs, usage)}")

    run.__doc__ = description
    nox.session(name=command)(run)


for _command, (_description, _usage) in images_cli.SESSIONS.items():
    _image_session(_command, _description, _usage)


@nox.session
def cluster(session: nox.Session) -> None:
    """JobSet or Slurm script for the images: `cluster -- RELEASE tpu|gpu|slurm --exp=NAME [-o F]`."""
    sessions.status(launch.main(list(session.posargs)))


@nox.session
def diff(session: nox.Session) -> None:
    """Diff two locks: `diff -- A B [--platform cpu] [--json]` (release, path or GITREV:path)."""
    sessions.status(releases_cli.diff(list(session.posargs)))


@nox.session
def bisect(session: nox.Session) -> None:
    """Find the package change that breaks a command: `bisect -- --good A --bad B -- COMMAND...`."""
    sessions.status(bisect_cli.main(list(session.posargs)))


@nox.session
def release(session: nox.Session) -> None:
    """Cut a release (locks, tests, commits, tags, image IDs): `release -- X.Y.Z [--recreate]`.

    The branch is rX.Y.Z, the tag vX.Y.Z; `--record-images`: pax.images.cli.cut_or_record."""
    with _errors(session):
        recorded = images_cli.cut_or_record(list(session.posargs), ROOT, log=session.log)
    if recorded is not None:
        session.log(f"record: {recorded}")


@nox.session
def readme(session: nox.Session) -> None:
    """Regenerate README's, CHANGELOG's, docs' generated blocks: `readme -- [--check]`."""
    with _errors(session):
        check = "--check" in sessions.flags(session.posargs, {"--check"}, "readme -- [--check]")
        extra = bench_table.blocks()
        doc_blocks.main(ROOT, check, extra=extra, log=session.log)


@nox.session
def bench(session: nox.Session) -> None:
    """Trainer, its model in a minimal loop, an independent baseline: `bench -- [RELEASE] [--help]`."""
    _in_env(session, "benchmarks.bench", platform=False)


@nox.session
def bench_c4(session: nox.Session) -> None:
    """C4 input tokens/s vs the trainer's needs: `bench_c4 -- [RELEASE] [--data_dir D] [--json F]`."""
    _in_env(session, "benchmarks.c4_input", platform=False)


@nox.session
def data(session: nox.Session) -> None:
    """C4 data commands: `data -- [RELEASE] sample|spm|inspect ...` (python -m pax.data)."""
    _in_env(session, "pax.data", platform=False, or_args=["--help"])


def _curves(session: nox.Session, command: str) -> None:
    """pax.curves (no jax; matplotlib is the tools venv's)."""
    args = [sys.executable, "-m", "pax.curves", command, *session.posargs]
    sessions.run(args, {"PYTHONPATH": str(ROOT)})


@nox.session
def plot(session: nox.Session) -> None:
    """Draw runs' loss and log-perplexity: `plot -- JOB_DIR... [--out F.png] [--reference NAME]`."""
    _curves(session, "plot")


@nox.session
def compare(session: nox.Session) -> None:
    """Judge a run by its reference band (exit 0 in, 1 out, 125 cannot judge): `compare -- JOB_DIR`."""
    _curves(session, "compare")


@nox.session
def references(session: nox.Session) -> None:
    """Re-record a reference band: `references -- [RELEASE] [PLATFORM] [--help]`.

    tpu, gpu: the band of that platform, recorded in its env, shipped beside the CPU one."""
    args = list(session.posargs)
    release, platform = _release(session, args)
    with _errors(session):
        parsed = refs.parse_args(args)
        env = _env(session, release, platform)
        run_env = {**os.environ, **env.session_env()}
        ref = refs.record(
            env.python, run_env, release.version, parsed, log=session.log, platform=platform
        )
    session.log(f"references: wrote {ref.summary()}")


@nox.session
def aot(session: nox.Session) -> None:
    """Plan memory with the target's compiler, no TPU or GPU needed: `aot -- [RELEASE] [EXP ...]`.

    `aot -- [RELEASE] [tpu|gpu] [EXP ...] [--tpu v5e] [--gpu h100]` runs in the release's tpu env, whose libtpu compiles for a TPU topology on this CPU, or with
    `gpu` or --gpu in its gpu env, whose CUDA plugin compiles for GPUs; without experiments,
    that platform's reference rows (`--cpu`: XLA:CPU's upper bound on virtual CPU devices)."""
    args = list(session.posargs)
    release, _ = _release(session, args, platform=False)
    env = _env(session, release, job_flags.pop_aot_platform(args))
    sessions.run([env.python, "-m", "pax.aot", *args], env.session_env(), log=session.log)


@nox.session
def tutorial(session: nox.Session) -> None:
    """Run docs/tutorial.ipynb in a release's CPU env, storing its outputs: `tutorial -- [RELEASE]`."""
    env = _env(session, *_release(session, list(session.posargs), platform=False))
    # The notebook runs on the one CPU device a reader has, not on virtual devices.
    with _errors(session):
        run_env = {**testtools.prepare(env, log=session.log), "XLA_FLAGS": ""}
    execute = [env.python, *testtools.JUPYTER_EXECUTE, "--inplace", "--timeout=3000"]
    sessions.run([*execute, ROOT / "docs" / "tutorial.ipynb"], run_env, log=session.log)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff format --check and ruff check (pinned in tools.txt): `lint -- [--fix]` rewrites."""
    with _errors(session):
        fix = "--fix" in sessions.flags(session.posargs, {"--fix"}, "lint -- [--fix]")
    ruff = Path(sys.executable).parent / "ruff"
    sessions.run([ruff, "format", *([] if fix else ["--check"]), "."], log=session.log)
    sessions.run([ruff, "check", *(["--fix"] if fix else []), "."], log=session.log)


def _only_known_sessions() -> None:
    """`-s NAME` for a session this file does not have: one line and exit 2, before nox's own
    answer (exit 3, which pytest's internal error shares). nox's parser reads the command line
    as nox itself will."""
    from nox import _options, registry

    requested = _options.options.parse_args(sys.argv[1:]).sessions or []
    with sessions.one_line("noxw"):
        sessions.check_selected(requested, list(registry.get()))


_only_known_sessions()
