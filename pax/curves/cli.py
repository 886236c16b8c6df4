"""pax-plot / python -m pax.curves: draw runs' curves, judge a run against its reference.

  python -m pax.curves plot JOB_DIR... [--out F.png] [--reference NAME|FILE.json|none]
  python -m pax.curves compare JOB_DIR [--reference NAME|FILE.json] [--alpha A] [--partial]
  python -m pax.curves calibration [NAME|FILE.json] [--out F.png]
  python -m pax.curves references                 list the shipped references

`pax-plot JOB_DIR...` is `plot`. The reference defaults to the shipped one for the run's
experiment (config.json). compare's exit status works as a bisect COMMAND: 0 inside the
band, 1 outside, 125 the run cannot be judged yet (started but no metrics, stopped early), 2 bad
input (one line on stderr: no such job directory, unknown reference, a run of another
experiment or config).
`calibration` re-judges the held-out seeds and broken runs a reference keeps: exit 0 when
every held-out seed passes and every broken run fails, else 1.
"""

from __future__ import annotations

import argparse
import sys

from pax.curves.compare import (
    judge,
    judge_recorded,
    recorded_run,
    run_platform,
)
from pax.curves.job_dir import CannotJudge, CurvesError, read_run
from pax.curves.reference import load_reference, reference_for, reference_names
from pax.errors import USAGE, ExitingArgumentParser, report


def _alpha(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (0.01 is 1%), not {text}")
    return value


def _parser(prog: str) -> argparse.ArgumentParser:
    p = ExitingArgumentParser(
        prog=prog, description="Loss curves of Pax runs, and reference bands."
    )
    sub = p.add_subparsers(dest="command", required=True, parser_class=ExitingArgumentParser)
    ref_help = (
        "shipped reference name (%s), a reference .json, or 'none'; default: the one "
        "for the run's experiment" % (", ".join(reference_names()) or "none shipped")
    )
    pl = sub.add_parser("plot", help="draw runs' loss over the reference's acceptance regions")
    pl.add_argument("job_dirs", nargs="+", metavar="JOB_DIR")
    pl.add_argument("--out", default="curves.png", help="PNG to write (default curves.png)")
    pl.add_argument("--reference", default=None, help=ref_help)
    pl.add_argument("--title", default=None)
    cp = sub.add_parser("compare", help="is a run one more healthy seed? (exit 0/1/125)")
    cp.add_argument("job_dir", metavar="JOB_DIR")
    cp.add_argument("--reference", default=None, help=ref_help)
    cp.add_argument(
        "--alpha",
        type=_alpha,
        default=None,
        help="false-alarm rate for a healthy run (default: the reference's, 0.01)",
    )
    cp.add_argument(
        "--partial",
        action="store_true",
        help="judge only the checks the run has logged (a run in progress)",
    )
    ca = sub.add_parser("calibration", help="re-judge a reference's held-out seeds and broken runs")
    ca.add_argument("reference", nargs="?", default="LmCloudSpmdTiny", help=ref_help)
    ca.add_argument("--out", default=None, help="also draw the deviations into this PNG")
    sub.add_parser("references", help="list the shipped references")
    return p


def _reference(name: str | None, run, required: bool):
    if name is not None and name.lower() == "none":
        if required:
            raise CurvesError("compare needs a reference; 'none' is only for plot")
        return None
    if name is None:
        # The band recorded on the run's platform where one is shipped (rounding differs).
        name = reference_for(run.experiment, run_platform(run))
        if name is None:
            if required:
                raise CurvesError(
                    f"{run.job_dir}: no shipped reference for experiment "
                    f"{run.experiment or '(no config.json)'}; pass --reference "
                    f"NAME|FILE.json (shipped: "
                    f"{', '.join(reference_names()) or 'none'})"
                )
            return None
    return load_reference(name)


def calibration(name: str, out: str | None = None) -> int:
    ref = load_reference(name)
    if not ref.calibration:
        raise CurvesError(f"{ref.name}: no calibration runs recorded (held-out seeds, broken runs)")
    verdicts: dict[str, list] = {}
    runs = []
    bad = 0
    print(
        f"{ref.name}: band of {ref.n} seeds, alpha {ref.alpha:g}, train window {ref.train_window}"
    )
    print(f"  {'run':<34} {'verdict':<8} deciding check (dev in seed stds, limit)")
    for kind, entries in ref.calibration.items():
        for entry in entries:
            fault = entry.get("fault")
            label = f"{fault['name']}" if fault else f"held-out seed {entry.get('seed')}"
            verdict = judge_recorded(entry, ref)
            verdicts.setdefault(kind, []).append((label, verdict))
            runs.append(recorded_run(entry, ref))
            expected_ok = kind == "held_out"
            wrong = verdict.ok != expected_ok
            bad += wrong
            row = verdict.deciding
            dev = f"{row.dev:+.2f}" if row is not None else "-"
            word = {0: "inside", 1: "OUTSIDE"}.get(verdict.code, "?")
            print(
                f"  {label:<34} {word:<8} {row.stat.check.label if row else '-'}: {dev} "
                f"(limit ±{row.limit:.2f})" + ("   <-- WRONG" if wrong else "")
            )
    if out:
        from pax.curves.draw import plot_calibration  # matplotlib only here

        print(f"wrote {plot_calibration(ref, verdicts, runs, out)}")
    print("calibration " + ("holds" if not bad else f"FAILS: {bad} run(s) judged wrongly"))
    return 1 if bad else 0


def main(argv: list[str] | None = None, prog: str = "python -m pax.curves") -> int:
    args = _parser(prog).parse_args(argv)
    try:
        if args.command == "references":
            for name in reference_names():
                ref = load_reference(name)
                seeds = ", ".join(str(s) for s in ref.seeds())
                cal = ", ".join(f"{len(v)} {k}" for k, v in ref.calibration.items())
                print(
                    f"{name}: {ref.experiment}, {ref.n} seeds ({seeds}), "
                    f"recorded {ref.recorded_at}" + (f"; calibration: {cal}" if cal else "")
                )
            return 0
        if args.command == "calibration":
            return calibration(args.reference, args.out)
        if args.command == "compare":
            try:
                run = read_run(args.job_dir)
                ref = _reference(args.reference, run, required=True)
                verdict = judge(run, ref, alpha=args.alpha, partial=args.partial)
            except CannotJudge as err:
                return report(prog, CannotJudge(f"cannot judge: {err}"))
            print(verdict.report)
            return verdict.code
        runs = [read_run(d) for d in args.job_dirs]
        ref = _reference(args.reference, runs[0], required=False)
        from pax.curves.draw import plot  # matplotlib only here

        out = plot(runs, args.out, reference=ref, title=args.title)
        print(f"wrote {out}" + (f" (band: reference {ref.name})" if ref else " (no band)"))
        return 0
    except CurvesError as err:  # bad input, whatever the command
        report(prog, err)
        return USAGE


def pax_plot() -> None:
    """Console script `pax-plot JOB_DIR... [--out F.png] [--reference NAME]` (= plot), or
    `pax-plot compare JOB_DIR ...`."""
    argv = sys.argv[1:]
    if not argv or argv[0] not in ("plot", "compare", "calibration", "references", "-h", "--help"):
        argv = ["plot", *argv]
    sys.exit(main(argv, prog="pax-plot"))
