"""Recording a reference band and its calibration: train each run afresh in a release's pinned
env, one after another, then write pax/curves/references/<Experiment>.json from them.

  ./noxw -s references -- [RELEASE] [--exp NAME] [--seeds 1-10] [--held-out 11-13]
                          [--faults all|none|NAME,...] [--fault-steps N] [--out F] [--reuse]

The band's seeds make the checks' means and stds; the held-out seeds (not in the band) and
one run per fault of pax.curves.faults (seeds of their own) are kept as its calibration, the
evidence that the verdict passes healthy runs and fails broken ones (`python -m pax.curves
calibration`, tests/curves/test_shipped.py). A broken run trains as long as the band's
seeds unless --fault-steps says otherwise; it is then judged on the checks it reaches. Short
broken runs are not enough in general: an earlier tiny model's run without warmup was within
the seeds' noise at step 60 (+2.8 stds at the step-50 eval) and only left the band later (+7.5
stds in the last train window). `all` is every fault of pax.curves.faults; any one can be named.

Runs from nox's tools venv: it imports no jax and starts the trainer as a subprocess of the
env's python. Job directories go under runs/references/<Experiment>/; --reuse keeps a run
whose directory already holds a finished run (its metrics reach its last step), so an
interrupted recording picks up where it stopped; without it every run starts afresh.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import time
from pathlib import Path

from pax import paths
from pax.curves import CurvesError, faults
from pax.curves import record as curves_record
from pax.curves.job_dir import read_metrics
from pax.curves.reference import REFERENCES_DIR, Reference, load_reference, shipped_name
from pax.environments import sessions

DEFAULT_EXPERIMENT = "tasks.lm.params.lm_cloud.LmCloudSpmdTiny"
DEFAULT_SEEDS = "1-10"
DEFAULT_HELD_OUT = "11,12,1234"  # 1234: SEED's default, the README's `./noxw -s train` run
# The faults the band is calibrated on: every one of pax.curves.faults breaks the tiny run since
# it learns its attention (rotary positions, Gaussian init); with LmCloudSpmd's own positions
# and init, no_warmup and causal_mask_dropped stayed inside the band.
FAULTS = tuple(faults.FAULTS)
FAULT_SEED = 101  # the broken runs' seeds: 101, 102, ...: in neither the band nor held out


def parse_seeds(text: str, what: str = "--seeds", at_least: int = 2) -> list[int]:
    """`1,2,3` or `1-10` (or both: `1-5,8`) -> distinct integers; CurvesError otherwise."""
    seeds: list[int] = []
    try:
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            first, sep, last = part.partition("-")
            seeds += list(range(int(first), int(last) + 1)) if sep else [int(part)]
    except ValueError:
        raise CurvesError(f"{what} takes integers like 1,2,3 or 1-10, not {text!r}") from None
    if len(seeds) < at_least or len(set(seeds)) != len(seeds):
        raise CurvesError(f"{what} needs at least {at_least} distinct seeds, got {text!r}")
    return seeds


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise CurvesError(f"{message} (usage: {self.format_usage().strip()})")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = _Parser(prog="./noxw -s references --", add_help=False)
    p.add_argument("--exp", default=DEFAULT_EXPERIMENT)
    p.add_argument("--seeds", default=DEFAULT_SEEDS)
    p.add_argument("--held-out", "--held_out", dest="held_out", default=DEFAULT_HELD_OUT)
    p.add_argument("--faults", default="all")
    p.add_argument("--fault-steps", "--fault_steps", dest="fault_steps", type=int, default=None)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--reuse", action="store_true")
    args = p.parse_args(argv)
    args.seeds = parse_seeds(args.seeds)
    args.held_out = parse_seeds(args.held_out, "--held-out", 0) if args.held_out != "none" else []
    overlap = sorted(set(args.seeds) & set(args.held_out))
    if overlap:
        raise CurvesError(f"held-out seeds must not be band seeds: {overlap}")
    if args.faults in ("all", "none"):
        args.faults = list(FAULTS) if args.faults == "all" else []
    else:
        args.faults = [f.strip() for f in args.faults.split(",") if f.strip()]
        unknown = [f for f in args.faults if f not in faults.FAULTS]
        if unknown:
            raise CurvesError(
                f"unknown fault(s) {', '.join(unknown)}; faults: {', '.join(faults.FAULTS)}"
            )
    if args.fault_steps is not None and args.fault_steps < 1:
        raise CurvesError(f"--fault-steps must be positive, not {args.fault_steps}")
    return args


def _previous_walls(out: Path) -> dict[str, float]:
    """Wall times of the runs the existing reference at `out` recorded, by job directory."""
    try:
        ref = load_reference(out)
    except CurvesError:
        return {}
    runs = [*ref.runs, *(r for rs in ref.calibration.values() for r in rs)]
    return {r["job_dir"]: r["wall_s"] for r in runs if r.get("job_dir") and r.get("wall_s")}


def _length(job_dir: Path) -> int | None:
    try:
        return json.loads((job_dir / "config.json").read_text())["task"]["train"]["num_train_steps"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _finished(job_dir: Path, steps: int | None = None) -> bool:
    """A run that reached its last step (config.json's num_train_steps, which must be `steps`
    when given) and wrote its manifest."""
    try:
        config = json.loads((job_dir / "config.json").read_text())
        last = config["task"]["train"]["num_train_steps"]
        curves, _ = read_metrics(job_dir / "metrics.jsonl")
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if steps is not None and last != steps:
        return False
    return (job_dir / "manifest.json").is_file() and last in curves.get("train", {}).get("loss", {})


def record(
    python: Path,
    env: dict[str, str],
    release: str,
    args: argparse.Namespace,
    log=print,
    root: Path = paths.ROOT,
    platform: str = "cpu",
) -> Reference:
    """Train the band's seeds, the held-out seeds and the broken runs with `python` (a release
    env's, for `platform`) in `root` (the checkout), then write the reference: a band recorded
    on a TPU or GPU is shipped beside the CPU one as `<Experiment>.<platform>`."""
    experiment = args.exp
    name = shipped_name(experiment, platform)
    out = args.out or REFERENCES_DIR / f"{name}.json"
    base = Path("runs") / "references" / name
    python = Path(python)
    walls = _previous_walls(out) if args.reuse else {}
    env_python = str(python.relative_to(root) if python.is_relative_to(root) else python)

    def train(job: str, module: list[str], flags: list[str], shown: list[str], steps=None):
        job_dir = base / job
        flags = [f"--exp={experiment}", f"--job_log_dir={job_dir}", *flags]
        wall = None
        if args.reuse and _finished(root / job_dir, steps):
            log(f"references: {job}: reusing the finished run in {job_dir}")
            wall = walls.get(str(job_dir))  # as the reference it was recorded into said
        else:
            shutil.rmtree(root / job_dir, ignore_errors=True)  # a fresh run, never a resume
            start = time.monotonic()
            # A signal reaches the run, which saves; the session ends with the run's status.
            code = sessions.call([python, "-m", *module, *flags], env, cwd=root)
            if code:
                failed = CurvesError(
                    f"{job}: training failed (exit {code}); see its log above ({job_dir})"
                )
                failed.exit_code = code
                raise failed
            wall = round(time.monotonic() - start, 1)
            log(f"references: {job} took {wall:.0f} s")
        return curves_record.Recorded(root / job_dir, shlex.join([*shown, *flags]), wall)

    train_cmd = ["./noxw", "-s", "train", "--", release, platform]
    seeds = [train(f"seed{s}", ["pax.main"], [f"--set=SEED={s}"], train_cmd) for s in args.seeds]
    held = [train(f"seed{s}", ["pax.main"], [f"--set=SEED={s}"], train_cmd) for s in args.held_out]
    # A reused broken run must be as long as asked: the seeds' length unless --fault-steps.
    length = args.fault_steps or _length(root / base / f"seed{args.seeds[0]}")
    broken = []
    for fault in args.faults:
        # Each fault's seed follows its place in pax.curves.faults, whichever ones are recorded.
        flags = [f"--fault={fault}", f"--set=SEED={FAULT_SEED + list(faults.FAULTS).index(fault)}"]
        if args.fault_steps:
            flags.append(f"--set=NUM_TRAIN_STEPS={args.fault_steps}")
        shown = [env_python, "-m", "pax.curves.faults"]
        broken.append(train(f"fault-{fault}", ["pax.curves.faults"], flags, shown, length))
    recorded_by = shlex.join(
        [
            "./noxw",
            "-s",
            "references",
            "--",
            release,
            *([platform] if platform != "cpu" else []),
            f"--exp={experiment}",
            f"--seeds={','.join(map(str, args.seeds))}",
            f"--held-out={','.join(map(str, args.held_out)) or 'none'}",
            f"--faults={','.join(args.faults) or 'none'}",
            *([f"--fault-steps={args.fault_steps}"] if args.fault_steps else []),
        ]
    )
    calibration = {k: v for k, v in (("held_out", held), ("broken", broken)) if v}
    return curves_record.record(
        seeds, name, out, recorded_by=recorded_by, root=root, calibration=calibration
    )
