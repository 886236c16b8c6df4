"""Pax's sessions. Run them through the wrapper: `./noxw -s test`, `./noxw -s train`.

Every session that runs the trainer uses one pinned environment per (release, platform),
`.venv/pax-<release>-<platform>`, built from `releases/<release>/<platform>.txt` and checked
against it before each use (pax.environments.venv). Sessions themselves get no nox venv
(venv_backend="none"), so `train` and `test` share that one environment.

  ./noxw -s test  -- [RELEASE] [--full] [pytest args]   fast tier against a release (default:
                                                  newest); --full adds the slow tier
  ./noxw -s train -- [RELEASE] [PLATFORM] [flags]    tiny LM run; flags go to pax.main
  ./noxw -s bench -- [RELEASE] [--json FILE]      trainer, minimal loop, baseline; MFU, I/O;
                                                  decoding with the KV cache vs recompute
  ./noxw -s decode -- [RELEASE] [PLATFORM] [flags]   continuations from the tiny run's checkpoint
  ./noxw -s data  -- [RELEASE] sample|spm|inspect ...     C4 shards, SentencePiece, inspection
  ./noxw -s lock  -- RELEASE|nightly|tools [PLATFORM...]   recompile lockfiles
  ./noxw -s env   -- [RELEASE] [PLATFORM] [--json]        the env's identity and drift (pax env)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

# The distribution packages import no jax: they run here, in the tools venv.
from benchmarks import table as bench_table
from pax.bisect import cli as bisect_cli
from pax.curves import CurvesError
from pax.docs import blocks as doc_blocks
from pax.environments import venv
from pax.images import cli as images_cli
from pax.launch import render as launch
from pax.releases import catalog, cut
from pax.releases import compile as locks
from pax.releases import diff as lock_diff
from pax.releases import readme as readme_blocks
from pax.tools import references as refs

nox.options.sessions = ["test"]

TRAIN_DEFAULTS = {
    "--exp": "tasks.lm.params.lm_cloud.LmCloudSpmdTiny",
    "--job_log_dir": "runs/tiny",
}


def _release(session: nox.Session, args: list[str]) -> catalog.Release:
    """Pop an optional leading release name off args; default is the newest cut release."""
    name = args.pop(0) if args and catalog.looks_like_release(args[0]) else None
    try:
        return catalog.resolve(name)
    except catalog.UnknownRelease as err:
        session.error(str(err))


def _env(session: nox.Session, release: catalog.Release, platform: str) -> venv.Env:
    try:
        return venv.ensure(release, platform, log=session.log)
    except (venv.EnvMismatch, FileNotFoundError) as err:
        session.error(str(err))
    except subprocess.CalledProcessError as err:
        session.error(f"building the {release.version} {platform} env failed: {err}")


def _flag_value(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(args):
            return args[i + 1]
    return None


@nox.session(venv_backend="none")
def test(session: nox.Session) -> None:
    """Run pytest in a release's pinned CPU env: `test -- [RELEASE] [--full] [pytest args]`;
    the fast tier by default, `--full` adds the tests marked slow."""
    args = list(session.posargs)
    release = _release(session, args)
    env = _env(session, release, "cpu")
    # Tests choose their own devices (conftest sets XLA_FLAGS before jax loads).
    targets = [] if any(Path(a.split("::")[0]).exists() for a in args) else ["tests"]
    session.run(
        str(env.python), "-m", "pytest", *targets, *args, env=env.session_env(), external=True
    )


@nox.session(venv_backend="none")
def train(session: nox.Session) -> None:
    """Train the tiny LM: `train -- [RELEASE] [PLATFORM] [--exp=... --job_log_dir=... ...]`."""
    args = list(session.posargs)
    release = _release(session, args)
    platform = args.pop(0) if args and args[0] in catalog.LOCK_PLATFORMS else "cpu"
    # Everything else goes to pax.main as is (`--flag=value` or `--flag value`).
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    flags = [f"{k}={v}" for k, v in TRAIN_DEFAULTS.items() if k not in given] + args
    job_dir = Path(_flag_value(flags, "--job_log_dir"))
    env = _env(session, release, platform)
    session.run(str(env.python), "-m", "pax.main", *flags, env=env.session_env(), external=True)
    job_dir = job_dir if job_dir.is_absolute() else ROOT / job_dir
    metrics = sorted(job_dir.rglob("metrics.jsonl")) if job_dir.is_dir() else []
    session.log(f"job dir: {job_dir}")
    for path in metrics or [job_dir / "metrics.jsonl (not written)"]:
        session.log(f"metrics: {path}")


@nox.session(venv_backend="none")
def decode(session: nox.Session) -> None:
    """Continue prompts with the tiny run's newest checkpoint: `decode -- [RELEASE] [PLATFORM]
    [--prompt=TEXT ...]` (pax.main --mode=decode_once on runs/tiny; flags go to pax.main)."""
    args = list(session.posargs)
    release = _release(session, args)
    platform = args.pop(0) if args and args[0] in catalog.LOCK_PLATFORMS else "cpu"
    defaults = {**TRAIN_DEFAULTS, "--mode": "decode_once"}
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    flags = [f"{k}={v}" for k, v in defaults.items() if k not in given] + args
    env = _env(session, release, platform)
    session.run(str(env.python), "-m", "pax.main", *flags, env=env.session_env(), external=True)


@nox.session(venv_backend="none")
def env(session: nox.Session) -> None:
    """A release env's identity and drift: `env -- [RELEASE] [PLATFORM] [--json]` (python -m pax
    env in it; exit 0 when it is exactly its lock)."""
    args = list(session.posargs)
    release = _release(session, args)
    platform = args.pop(0) if args and args[0] in catalog.LOCK_PLATFORMS else "cpu"
    path = venv.env_path(release, platform)
    # An env that is there is described as it is (a drifted one shows its drift table, where
    # building would stop at the mismatch); a missing one is built first.
    python = path / "bin" / "python" if path.exists() else _env(session, release, platform).python
    # Only the repo on the path, no PAX_* variables: what a run started by hand from it sees.
    session.run(
        str(python), "-m", "pax", "env", *args, env={"PYTHONPATH": str(ROOT)}, external=True
    )


@nox.session(venv_backend="none")
def lock(session: nox.Session) -> None:
    """Recompile lockfiles: `lock -- RELEASE|nightly|tools [PLATFORM...]`."""
    args = list(session.posargs)
    if not args:
        session.error(
            "lock: name a release, e.g. `./noxw -s lock -- 1.4.0 [cpu tpu gpu]`, "
            "`-- nightly` or `-- tools`"
        )
    name, platforms = args[0], args[1:]
    if name == "tools":
        locks.lock_tools(ROOT, log=session.log)
        return
    bad = [p for p in platforms if p not in catalog.LOCK_PLATFORMS]
    if bad:
        session.error(
            f"lock: unknown platform(s) {' '.join(bad)}; "
            f"platforms: {', '.join(catalog.LOCK_PLATFORMS)}"
        )
    if name == catalog.NIGHTLY:
        release = locks.make_nightly(ROOT)
    else:
        release = _release(session, [name])
    try:
        locks.lock(release, platforms or None, ROOT, log=session.log)
    except RuntimeError as err:
        session.error(str(err))


# Later: build, smoke, publish, release, diff, bisect, bench.


# Container images (Dockerfile.tpu / Dockerfile.gpu). The logic lives in pax.images;
# the engine, base image and registry come from ci/docker-engine.sh, ci/base-image.sh and
# ci/registry.sh.
def _images(session: nox.Session, command: str, usage: str) -> None:

    if len([a for a in session.posargs if not a.startswith("-")]) < 2:
        session.error(f"{command}: usage: ./noxw -s {command} -- {usage}")
    try:
        result = images_cli.run([command, *session.posargs])
    except images_cli.ImageError as err:
        session.error(str(err))
    session.log(f"{command}: {result}")


@nox.session(venv_backend="none")
def build(session: nox.Session) -> None:
    """Build pax:RELEASE-PLATFORM: `build -- RELEASE tpu|gpu [--base-image IMAGE]`."""
    _images(session, "build", "RELEASE tpu|gpu [--base-image IMAGE]")


@nox.session(venv_backend="none")
def smoke(session: nox.Session) -> None:
    """Train the tiny LM in the image offline and check its job dir: `smoke -- RELEASE PLATFORM`."""
    _images(session, "smoke", "RELEASE tpu|gpu [--steps N] [--keep DIR]")


@nox.session(venv_backend="none")
def publish(session: nox.Session) -> None:
    """Push, move latest-PLATFORM, pull back by digest: `publish -- RELEASE PLATFORM --registry H:P`."""
    _images(session, "publish", "RELEASE tpu|gpu --registry HOST:PORT")


@nox.session(venv_backend="none")
def cluster(session: nox.Session) -> None:
    """JobSet or Slurm script for the images: `cluster -- RELEASE tpu|gpu|slurm --exp=NAME [-o F]`."""

    if launch.main(list(session.posargs)):
        session.error("cluster: nothing written")


# Lockfile diff and dependency bisect. The logic lives in pax.releases.diff and pax.bisect.
@nox.session(venv_backend="none")
def diff(session: nox.Session) -> None:
    """Diff two locks: `diff -- A B [--platform cpu] [--json]` (release, path or GITREV:path)."""

    code = lock_diff.main(list(session.posargs))
    if code:
        session.error(f"diff: exit {code}")


@nox.session(venv_backend="none")
def bisect(session: nox.Session) -> None:
    """Find the package change that breaks a command: `bisect -- --good A --bad B -- COMMAND...`."""

    code = bisect_cli.main(list(session.posargs))
    if code:
        session.error(f"bisect: exit {code}")


# Releases: cut one (pax.releases.cut) and regenerate the releases tables (pax.releases.readme).
@nox.session(venv_backend="none")
def release(session: nox.Session) -> None:
    """Cut a release: `release -- X.Y.Z [--skip-tests] [--base-image IMAGE]` (locks, tests,
    commit, branch rX.Y.Z, tag vX.Y.Z)."""

    args = cut.parse_args(list(session.posargs))
    try:
        cut.cut(
            args.version,
            ROOT,
            skip_tests=args.skip_tests,
            base_image=args.base_image,
            log=session.log,
        )
    except cut.CutError as err:
        session.error(str(err))
    except RuntimeError as err:  # a failed pip-compile, a pin the lock does not honour
        session.error(f"release: {err}")


@nox.session(venv_backend="none")
def readme(session: nox.Session) -> None:
    """Regenerate every marked block (releases tables, support matrix, changelog pins, GPU XLA
    flags, reference bands) in README.md, CHANGELOG.md, docs/*.md, Dockerfile.gpu: `readme --
    [--check]`."""
    check = "--check" in session.posargs
    try:
        changed = doc_blocks.refresh(ROOT, check=check, extra=[bench_table.block()])
    except readme_blocks.ReadmeError as err:
        session.error(str(err))
    for path in changed:
        session.log(
            f"readme: {path.relative_to(ROOT)} {'is out of date' if check else 'rewritten'}"
        )
    if check and changed:
        session.error("readme: generated blocks out of date; run ./noxw -s readme")
    if not changed:
        session.log("readme: every generated block is up to date")


def _run_module(session: nox.Session, module: str, default_args: tuple = ()) -> None:
    """`python -m module ARGS` in a release's CPU env; posargs: [RELEASE] ARGS."""
    args = list(session.posargs)
    release = _release(session, args)
    env = _env(session, release, "cpu")
    session.run(
        str(env.python), "-m", module, *(args or default_args), env=env.session_env(), external=True
    )


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """Trainer, its model in a minimal loop, an independent baseline: `bench -- [RELEASE] [--help]`."""
    _run_module(session, "benchmarks.bench")


@nox.session(venv_backend="none")
def bench_c4(session: nox.Session) -> None:
    """C4 input tokens/s vs the trainer's needs: `bench_c4 -- [RELEASE] [--data_dir D] [--json F]`."""
    _run_module(session, "benchmarks.c4_input")


@nox.session(venv_backend="none")
def data(session: nox.Session) -> None:
    """C4 data commands: `data -- [RELEASE] sample|spm|inspect ...` (python -m pax.data)."""
    _run_module(session, "pax.data", ("--help",))


# Loss curves (pax.curves: no jax; matplotlib comes with the tools venv, never a release lock).
def _curves(session: nox.Session, command: str, usage: str) -> None:
    if not session.posargs:
        session.error(f"{command}: usage: ./noxw -s {command} -- {usage}")
    session.run(
        sys.executable,
        "-m",
        "pax.curves",
        command,
        *session.posargs,
        external=True,
        env={"PYTHONPATH": str(ROOT)},
    )


@nox.session(venv_backend="none")
def plot(session: nox.Session) -> None:
    """Draw runs' loss and log-perplexity: `plot -- JOB_DIR... [--out F.png] [--reference NAME]`."""
    _curves(session, "plot", "JOB_DIR... [--out F.png] [--reference NAME]")


@nox.session(venv_backend="none")
def compare(session: nox.Session) -> None:
    """Judge a run against its reference: `compare -- JOB_DIR [--reference NAME] [--alpha A]
    [--partial]`; exits as pax.curves compare: 0 inside, 1 outside, 125 cannot judge, 2 bad input."""
    if not session.posargs:
        session.error("compare: usage: ./noxw -s compare -- JOB_DIR [--reference NAME]")
    code = subprocess.call(
        [sys.executable, "-m", "pax.curves", "compare", *session.posargs],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if code:
        session.log(f"compare: exit {code}")
        # nox turns every failed session into exit 1; scripts and bisect need 1, 2 and 125 apart
        raise SystemExit(code)


@nox.session(venv_backend="none")
def references(session: nox.Session) -> None:
    """Re-record a reference band and its calibration (pax.tools.references): `references --
    [RELEASE] [--exp NAME] [--seeds 1-10] [--held-out 11-13] [--faults all|none|A,B]
    [--fault-steps 60] [--out F] [--reuse]`; each run trained in the pinned CPU env."""
    args = list(session.posargs)
    release = _release(session, args)
    try:
        parsed = refs.parse_args(args)
    except CurvesError as err:
        session.error(f"references: {err}")
    env = _env(session, release, "cpu")
    try:
        ref = refs.record(
            env.python,
            {**os.environ, **env.session_env()},
            release.version,
            parsed,
            log=session.log,
        )
    except CurvesError as err:
        session.error(f"references: {err}")
    cal = ", ".join(f"{len(v)} {k}" for k, v in ref.calibration.items()) or "no calibration"
    session.log(f"references: wrote {ref.name} ({ref.n} seeds; {cal})")


@nox.session(venv_backend="none")
def aot(session: nox.Session) -> None:
    """Compile experiments for their full mesh on virtual CPU devices (pax.tools.aot):
    `aot -- [RELEASE] [EXP ...] [--json F]`. Without experiments: every Pax reference one,
    written to docs/aot.json and README's table; fails when one that should fit does not."""
    args = list(session.posargs)
    release = _release(session, args)
    env = _env(session, release, "cpu")
    session.run(str(env.python), "-m", "pax.tools.aot", *args, env=env.session_env(), external=True)


@nox.session(venv_backend="none")
def tutorial(session: nox.Session) -> None:
    """Run docs/tutorial.ipynb top to bottom in a release's CPU env (nbclient's jupyter-execute)
    and store it with its outputs: `tutorial -- [RELEASE]`; the run goes to runs/tutorial."""
    args = list(session.posargs)
    env = _env(session, _release(session, args), "cpu")
    # The notebook runs on the one CPU device a reader has, not on virtual devices.
    run_env = {**env.session_env(), "XLA_FLAGS": ""}
    execute = str(env.python.parent / "jupyter-execute")
    notebook = str(ROOT / "docs" / "tutorial.ipynb")
    session.run(execute, "--inplace", "--timeout=3000", notebook, env=run_env, external=True)


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """One style for the tree: `ruff format --check` and `ruff check` (pinned in tools.txt);
    `lint -- --fix` rewrites instead."""
    ruff = str(Path(sys.executable).parent / "ruff")
    if "--fix" in session.posargs:
        session.run(ruff, "format", ".", external=True)
        session.run(ruff, "check", "--fix", ".", external=True)
        return
    session.run(ruff, "format", "--check", ".", external=True)
    session.run(ruff, "check", ".", external=True)
