"""Pax's sessions. Run them through the wrapper: `./noxw -s test`, `./noxw -s train`.

Every session that runs the trainer uses one pinned environment per (release, platform),
`.venv/pax-<release>-<platform>`, built from `releases/<release>/<platform>.txt` and checked
against it before each use (pax.environments.venv). Sessions themselves get no nox venv
(venv_backend="none"), so `train` and `test` share that one environment.

  ./noxw -s test  -- [RELEASE] [pytest args]        tests against a release (default: newest)
  ./noxw -s train -- [RELEASE] [PLATFORM] [flags]    tiny LM run; flags go to pax.main
  ./noxw -s bench -- [RELEASE] [--json FILE]             trainer vs minimal loop, MFU, I/O
  ./noxw -s data  -- [RELEASE] sample|spm|inspect ...     C4 shards, SentencePiece, inspection
  ./noxw -s lock  -- RELEASE|nightly|tools [PLATFORM...]   recompile lockfiles
  ./noxw -s env   -- [RELEASE] [PLATFORM] [--json]        the env's identity and drift (pax env)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from pax.environments import venv as dist_venv  # noqa: E402
from pax.releases import catalog as dist_release  # noqa: E402
from pax.releases import compile as dist_lock  # noqa: E402  (imports no jax: runs in the tools venv)

nox.options.sessions = ["test"]

TRAIN_DEFAULTS = {
    "--exp": "tasks.lm.params.lm_cloud.LmCloudSpmdTiny",
    "--job_log_dir": "runs/tiny",
}


def _release(session: nox.Session, args: list[str]) -> dist_release.Release:
    """Pop an optional leading release name off args; default is the newest cut release."""
    name = args.pop(0) if args and dist_release.looks_like_release(args[0]) else None
    try:
        return dist_release.resolve(name)
    except dist_release.UnknownRelease as err:
        session.error(str(err))


def _env(session: nox.Session, release: dist_release.Release, platform: str) -> dist_venv.Env:
    try:
        return dist_venv.ensure(release, platform, log=session.log)
    except (dist_venv.EnvMismatch, FileNotFoundError) as err:
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
    """Run pytest in a release's pinned CPU env: `test -- [RELEASE] [pytest args]`."""
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
    platform = args.pop(0) if args and args[0] in dist_release.LOCK_PLATFORMS else "cpu"
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
def env(session: nox.Session) -> None:
    """A release env's identity and drift: `env -- [RELEASE] [PLATFORM] [--json]` (python -m pax
    env in it; exit 0 when it is exactly its lock)."""
    args = list(session.posargs)
    release = _release(session, args)
    platform = args.pop(0) if args and args[0] in dist_release.LOCK_PLATFORMS else "cpu"
    path = dist_venv.env_path(release, platform)
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
        dist_lock.lock_tools(ROOT, log=session.log)
        return
    bad = [p for p in platforms if p not in dist_release.LOCK_PLATFORMS]
    if bad:
        session.error(
            f"lock: unknown platform(s) {' '.join(bad)}; "
            f"platforms: {', '.join(dist_release.LOCK_PLATFORMS)}"
        )
    if name == dist_release.NIGHTLY:
        release = dist_lock.make_nightly(ROOT)
    else:
        release = _release(session, [name])
    try:
        dist_lock.lock(release, platforms or None, ROOT, log=session.log)
    except RuntimeError as err:
        session.error(str(err))


# Later: build, smoke, publish, release, diff, bisect, bench.


# Container images (Dockerfile.tpu / Dockerfile.gpu). The logic lives in pax.images;
# the engine, base image and registry come from ci/docker-engine.sh, ci/base-image.sh and
# ci/registry.sh.
def _images(session: nox.Session, command: str, usage: str) -> None:
    from pax.images import cli as images  # noqa: PLC0415  (stdlib only)

    if len([a for a in session.posargs if not a.startswith("-")]) < 2:
        session.error(f"{command}: usage: ./noxw -s {command} -- {usage}")
    try:
        result = images.run([command, *session.posargs])
    except images.ImageError as err:
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
    from pax.launch import render as dist_cluster  # noqa: PLC0415  (stdlib + pax.experiments)

    if dist_cluster.main(list(session.posargs)):
        session.error("cluster: nothing written")


# Lockfile diff and dependency bisect. The logic lives in pax.releases.diff and pax.bisect.
@nox.session(venv_backend="none")
def diff(session: nox.Session) -> None:
    """Diff two locks: `diff -- A B [--platform cpu] [--json]` (release, path or GITREV:path)."""
    from pax.releases import diff as dist_diff  # noqa: PLC0415  (stdlib only)

    code = dist_diff.main(list(session.posargs))
    if code:
        session.error(f"diff: exit {code}")


@nox.session(venv_backend="none")
def bisect(session: nox.Session) -> None:
    """Find the package change that breaks a command: `bisect -- --good A --bad B -- COMMAND...`."""
    from pax.bisect import cli as dist_bisect  # noqa: PLC0415  (stdlib only)

    code = dist_bisect.main(list(session.posargs))
    if code:
        session.error(f"bisect: exit {code}")


# Releases: cut one (pax.releases.cut) and regenerate the releases tables (pax.releases.readme).
@nox.session(venv_backend="none")
def release(session: nox.Session) -> None:
    """Cut a release: `release -- X.Y.Z [--skip-tests] [--base-image IMAGE]` (locks, tests,
    commit, branch rX.Y.Z, tag vX.Y.Z)."""
    from pax.releases import cut as dist_cut  # noqa: PLC0415  (stdlib only)

    args = dist_cut.parse_args(list(session.posargs))
    try:
        dist_cut.cut(
            args.version,
            ROOT,
            skip_tests=args.skip_tests,
            base_image=args.base_image,
            log=session.log,
        )
    except dist_cut.CutError as err:
        session.error(str(err))
    except RuntimeError as err:  # a failed pip-compile, a pin the lock does not honour
        session.error(f"release: {err}")


@nox.session(venv_backend="none")
def readme(session: nox.Session) -> None:
    """Regenerate the releases tables between the markers: `readme -- [--check] [FILE...]`."""
    from pax.releases import readme as dist_readme  # noqa: PLC0415  (stdlib only)

    args = list(session.posargs)
    check = "--check" in args
    files = [a for a in args if a != "--check"] or list(dist_readme.FILES)
    try:
        changed = dist_readme.refresh(ROOT, files, check=check)
    except dist_readme.ReadmeError as err:
        session.error(str(err))
    for path in changed:
        session.log(
            f"readme: {path.relative_to(ROOT)} {'is out of date' if check else 'rewritten'}"
        )
    if check and changed:
        session.error("readme: releases tables out of date; run ./noxw -s readme")
    if not changed:
        session.log(f"readme: {', '.join(files)} up to date")


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
    """Trainer vs a hand-written loop, peak, checkpoint I/O, input: `bench -- [RELEASE] [--json F]`."""
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
@nox.session(venv_backend="none")
def plot(session: nox.Session) -> None:
    """Draw runs' loss and log-perplexity: `plot -- JOB_DIR... [--out F.png] [--reference NAME]`."""
    if not session.posargs:
        session.error("plot: usage: ./noxw -s plot -- JOB_DIR... [--out F.png] [--reference NAME]")
    session.run(
        sys.executable,
        "-m",
        "pax.curves",
        "plot",
        *session.posargs,
        external=True,
        env={"PYTHONPATH": str(ROOT)},
    )


@nox.session(venv_backend="none")
def compare(session: nox.Session) -> None:
    """Is a run inside its reference band: `compare -- JOB_DIR [--reference NAME] [--partial]`."""
    if not session.posargs:
        session.error("compare: usage: ./noxw -s compare -- JOB_DIR [--reference NAME]")
    session.run(
        sys.executable,
        "-m",
        "pax.curves",
        "compare",
        *session.posargs,
        external=True,
        env={"PYTHONPATH": str(ROOT)},
    )


@nox.session(venv_backend="none")
def references(session: nox.Session) -> None:
    """Re-record a reference band: `references -- [RELEASE] [--seeds 1,2,3] [--exp NAME] [--out F]`.

    Trains each seed afresh, one after another, in the pinned CPU env, then writes
    pax/curves/references/<Experiment>.json (pax.curves.record)."""
    import shlex  # noqa: PLC0415
    import shutil  # noqa: PLC0415
    import time  # noqa: PLC0415

    from pax.curves import CurvesError  # noqa: PLC0415  (no jax)
    from pax.curves import record as curves_record  # noqa: PLC0415

    args = list(session.posargs)
    release = _release(session, args)
    exp = _flag_value(args, "--exp") or TRAIN_DEFAULTS["--exp"]
    seeds_text = _flag_value(args, "--seeds") or "1,2,3"
    try:
        seeds = [int(s) for s in seeds_text.split(",") if s.strip()]
    except ValueError:
        session.error(f"references: --seeds takes integers like 1,2,3, not {seeds_text!r}")
    if len(seeds) < 2 or len(set(seeds)) != len(seeds):
        session.error(f"references: a band needs at least two distinct seeds, got {seeds_text!r}")
    name = exp.rsplit(".", 1)[-1]
    out = Path(
        _flag_value(args, "--out") or ROOT / "pax" / "curves" / "references" / f"{name}.json"
    )
    env = _env(session, release, "cpu")
    job_dirs, commands, walls = [], [], []
    for seed in seeds:
        job_dir = Path("runs") / "references" / name / f"seed{seed}"
        shutil.rmtree(ROOT / job_dir, ignore_errors=True)  # a fresh run, never a resume
        flags = [f"--exp={exp}", f"--job_log_dir={job_dir}", f"--set=SEED={seed}"]
        start = time.monotonic()
        session.run(str(env.python), "-m", "pax.main", *flags, env=env.session_env(), external=True)
        walls.append(round(time.monotonic() - start, 1))
        session.log(f"references: seed {seed} took {walls[-1]:.0f} s")
        job_dirs.append(ROOT / job_dir)
        commands.append(shlex.join(["./noxw", "-s", "train", "--", release.version, "cpu", *flags]))
    recorded_by = shlex.join(
        [
            "./noxw",
            "-s",
            "references",
            "--",
            release.version,
            f"--exp={exp}",
            f"--seeds={','.join(map(str, seeds))}",
        ]
    )
    try:
        ref = curves_record.record(
            job_dirs, name, commands, out, recorded_by=recorded_by, wall_s=walls, root=ROOT
        )
    except CurvesError as err:
        session.error(f"references: {err}")
    session.log(f"references: wrote {out} ({len(ref.runs)} runs, seeds {seeds_text})")


@nox.session(venv_backend="none")
def aot(session: nox.Session) -> None:
    """Compile reference experiments for their full mesh on virtual CPU devices:
    `aot -- [RELEASE] [EXP ...] [--json F]`. Without experiments: every Pax-named one, written
    to docs/aot.json and README's table."""
    from pax.releases import readme as dist_readme  # noqa: PLC0415  (stdlib only)

    args = list(session.posargs)
    release = _release(session, args)
    reference_set = not [a for a in args if not a.startswith("--")]
    if reference_set:
        args = [
            "LmCloudSpmd2BLimitSteps",
            "LmCloudTransformerAdamLimitSteps",
            "C4Spmd1BAdam4Replicas",
            "C4Spmd16BAdam32Replicas",
            "C4SpmdPipelineGpt3SmallAdam64Replicas",
            "--json",
            dist_readme.AOT_JSON,
            *args,
        ]
    env = _env(session, release, "cpu")
    session.run(
        str(env.python),
        "-m",
        "pax.tools.aot",
        *args,
        env=env.session_env(),
        external=True,
        success_codes=[0, 1],
    )
    if reference_set:
        for path in dist_readme.refresh(ROOT, ["README.md"]):
            session.log(
                f"aot: {path.relative_to(ROOT)} table rewritten from {dist_readme.AOT_JSON}"
            )
