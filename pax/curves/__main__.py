"""pax-plot / python -m pax.curves: draw runs' curves, check a run against its reference.

  python -m pax.curves plot JOB_DIR... [--out F.png] [--reference NAME|FILE.json|none]
  python -m pax.curves compare JOB_DIR [--reference NAME|FILE.json] [--k K] [--atol A]
                                       [--rtol R] [--partial]
  python -m pax.curves references                 list the shipped references

`pax-plot JOB_DIR...` is `plot`. The reference defaults to the shipped one for the run's
experiment (config.json). Exit status: 0 fine (compare: inside the band), 1 compare: outside
the band or incomplete, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys

from pax.curves.compare import ATOL, K_SIGMA, RTOL, Tolerance, compare
from pax.curves.reference import load_reference, reference_for, reference_names
from pax.curves.runs import CurvesError, read_run


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        print(f"{self.prog}: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def _parser(prog: str) -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description="Loss curves of Pax runs, and reference bands.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    ref_help = (
        "shipped reference name (%s), a reference .json, or 'none'; default: the one "
        "for the run's experiment" % (", ".join(reference_names()) or "none shipped")
    )
    pl = sub.add_parser("plot", help="draw loss and log-perplexity vs step into a PNG")
    pl.add_argument("job_dirs", nargs="+", metavar="JOB_DIR")
    pl.add_argument("--out", default="curves.png", help="PNG to write (default curves.png)")
    pl.add_argument("--reference", default=None, help=ref_help)
    pl.add_argument("--title", default=None)
    cp = sub.add_parser("compare", help="is a run inside its reference band? (exit 0/1)")
    cp.add_argument("job_dir", metavar="JOB_DIR")
    cp.add_argument("--reference", default=None, help=ref_help)
    cp.add_argument(
        "--k",
        type=float,
        default=K_SIGMA,
        help=f"band widened by max(k*sigma, atol, rtol*|band mean|), sigma the "
        f"recorded seed-to-seed std (default k {K_SIGMA})",
    )
    cp.add_argument("--atol", type=float, default=ATOL, help=f"(default {ATOL})")
    cp.add_argument("--rtol", type=float, default=RTOL, help=f"(default {RTOL})")
    cp.add_argument(
        "--partial",
        action="store_true",
        help="check only the steps the run has logged (a run in progress)",
    )
    sub.add_parser("references", help="list the shipped references")
    return p


def _reference(name: str | None, run, required: bool):
    if name is not None and name.lower() == "none":
        if required:
            raise CurvesError("compare needs a reference; 'none' is only for plot")
        return None
    if name is None:
        name = reference_for(run.experiment)
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


def main(argv: list[str] | None = None, prog: str = "python -m pax.curves") -> int:
    args = _parser(prog).parse_args(argv)
    try:
        if args.command == "references":
            for name in reference_names():
                ref = load_reference(name)
                seeds = ", ".join(str(r.get("seed")) for r in ref.runs)
                print(
                    f"{name}: {ref.experiment}, {len(ref.runs)} runs (seeds {seeds}), "
                    f"recorded {ref.recorded_at}"
                )
            return 0
        if args.command == "compare":
            if min(args.k, args.rtol, args.atol) < 0:
                raise CurvesError("--k, --atol and --rtol must be >= 0")
            run = read_run(args.job_dir)
            ref = _reference(args.reference, run, required=True)
            tol = Tolerance(k=args.k, atol=args.atol, rtol=args.rtol)
            ok, report = compare(run, ref, tol, partial=args.partial)
            print(report)
            return 0 if ok else 1
        runs = [read_run(d) for d in args.job_dirs]
        ref = _reference(args.reference, runs[0], required=False)
        from pax.curves.draw import plot  # matplotlib only here

        out = plot(runs, args.out, reference=ref, title=args.title)
        print(f"wrote {out}" + (f" (band: reference {ref.name})" if ref else " (no band)"))
        return 0
    except CurvesError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2


def pax_plot() -> None:
    """Console script `pax-plot JOB_DIR... [--out F.png] [--reference NAME]` (= plot), or
    `pax-plot compare JOB_DIR ...`."""
    argv = sys.argv[1:]
    if not argv or argv[0] not in ("plot", "compare", "references", "-h", "--help"):
        argv = ["plot", *argv]
    sys.exit(main(argv, prog="pax-plot"))


if __name__ == "__main__":
    sys.exit(main())
