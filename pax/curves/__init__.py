"""Loss curves: read a job's metrics.jsonl, draw it, check a run against a reference band.

Imports neither jax nor numpy; matplotlib is imported only when something is drawn, so the
reading, band and compare logic runs anywhere (the pinned release env has no matplotlib; the
tools venv that ./noxw makes has it). Entry points: `python -m pax.curves plot|compare`,
the `pax-plot` console script, and `./noxw -s plot|compare|references`.
"""

from pax.curves.compare import Tolerance, compare
from pax.curves.reference import (
    METRICS,
    Band,
    Reference,
    load_reference,
    make_band,
    reference_names,
)
from pax.curves.runs import CurvesError, Run, read_metrics, read_run


def plot(job_dirs, out_png, reference=None, **kwargs):
    """Draw loss and log-perplexity against step for the runs in job_dirs into out_png."""
    from pax.curves.draw import plot as _plot  # matplotlib only here

    return _plot(job_dirs, out_png, reference=reference, **kwargs)


__all__ = [
    "CurvesError",
    "Run",
    "read_metrics",
    "read_run",
    "METRICS",
    "Band",
    "Reference",
    "load_reference",
    "make_band",
    "reference_names",
    "Tolerance",
    "compare",
    "plot",
]
