"""Loss curves: read a job's metrics.jsonl, draw it, judge a run against a reference band.

Imports neither jax nor numpy; matplotlib is imported only when something is drawn, so the
reading, band and verdict logic runs anywhere (the pinned release env has no matplotlib; the
tools venv that ./noxw makes has it; a bisect candidate env with neither runs compare).
Entry points: `python -m pax.curves plot|compare|calibration`, the `pax-plot` console script,
and `./noxw -s plot|compare|references`.
"""

from pax.curves.compare import CANNOT_JUDGE, INSIDE, OUTSIDE, Verdict, judge, judge_recorded
from pax.curves.job_dir import CannotJudge, CurvesError, Run, read_metrics, read_run
from pax.curves.reference import (
    METRICS,
    Check,
    Reference,
    Stat,
    load_reference,
    make_checks,
    make_stats,
    reference_names,
)


def plot(job_dirs, out_png, reference=None, **kwargs):
    """Draw the runs in job_dirs over the reference's acceptance regions into out_png."""
    from pax.curves.draw import plot as _plot  # matplotlib only here

    return _plot(job_dirs, out_png, reference=reference, **kwargs)


__all__ = [
    "CANNOT_JUDGE",
    "INSIDE",
    "OUTSIDE",
    "CannotJudge",
    "Check",
    "CurvesError",
    "METRICS",
    "Reference",
    "Run",
    "Stat",
    "Verdict",
    "judge",
    "judge_recorded",
    "load_reference",
    "make_checks",
    "make_stats",
    "plot",
    "read_metrics",
    "read_run",
    "reference_names",
]
