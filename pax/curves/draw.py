"""Drawing: loss and log-perplexity against step, train and eval, runs over a reference band.

The only module that imports matplotlib (the Agg canvas, no pyplot and no display).
"""

from __future__ import annotations

import os
from pathlib import Path

from pax.curves.compare import Tolerance
from pax.curves.reference import METRICS, Reference, load_reference
from pax.curves.runs import CurvesError, Run, read_run

TITLES = {"loss": "loss", "log_pplx": "log-perplexity (nats/token)"}


def _matplotlib():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise CurvesError(
            "drawing needs matplotlib, which this environment lacks; run it "
            "in the tools venv: ./noxw -s plot -- JOB_DIR..."
        ) from None
    return Figure


def plot(
    job_dirs, out_png, reference=None, tolerance: Tolerance | None = None, title: str | None = None
) -> Path:
    """Draw the runs in job_dirs (paths or Run objects) into out_png; return its path.

    reference: None (no band), a shipped reference name or .json path, or a Reference.
    The band is shaded per split (train and each eval split); the lighter rim around it is
    the tolerance margin `compare` allows.
    """
    Figure = _matplotlib()
    runs = [r if isinstance(r, Run) else read_run(r) for r in job_dirs]
    if not runs:
        raise CurvesError("plot: no job directories given")
    ref = load_reference(reference) if isinstance(reference, (str, os.PathLike)) else reference
    tol = tolerance or Tolerance()
    out = Path(out_png)
    if out.suffix.lower() != ".png":
        raise CurvesError(f"{out}: the output must be a .png file")
    if not out.parent.is_dir():
        raise CurvesError(f"{out.parent}: no such directory for the PNG")

    fig = Figure(figsize=(12, 4.8), dpi=110, layout="constrained")
    axes = fig.subplots(1, len(METRICS))
    colors = ["C0", "C1", "C2", "C3", "C4", "C5", "C6", "C8", "C9"]
    for ax, metric in zip(axes, METRICS):
        if ref is not None:
            _draw_band(ax, ref, metric, tol)
        for i, run in enumerate(runs):
            color = colors[i % len(colors)]
            for split in run.splits():
                series = run.series(split, metric)
                if not series:
                    continue
                steps = sorted(series)
                values = [series[s] for s in steps]
                is_train = split == "train"
                ax.plot(
                    steps,
                    values,
                    color=color,
                    linewidth=1.6 if is_train else 1.2,
                    linestyle="-" if is_train else "--",
                    marker=None if is_train else "o",
                    markersize=5,
                    label=f"{_run_label(run, runs)} {_split_label(split)}",
                )
        ax.set_xlabel("step")
        ax.set_ylabel(TITLES.get(metric, metric))
        ax.set_title(TITLES.get(metric, metric))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(title or _title(runs, ref), fontsize=10)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        fig.savefig(tmp, format="png")
        tmp.replace(out)  # a half-drawn PNG is never left under the asked name
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _draw_band(ax, ref: Reference, metric: str, tol: Tolerance) -> None:
    for split in ref.splits():
        band = ref.band(split, metric)
        if band is None:
            continue
        is_train = split == "train"
        color = "0.45" if is_train else "tab:purple"
        margins = [tol.margin(m, band.sigma) for m in band.mean]
        ax.fill_between(
            band.steps,
            [lo - m for lo, m in zip(band.lo, margins)],
            [hi + m for hi, m in zip(band.hi, margins)],
            color=color,
            alpha=0.12,
            linewidth=0,
        )
        ax.fill_between(
            band.steps,
            band.lo,
            band.hi,
            color=color,
            alpha=0.35,
            linewidth=0,
            label=f"reference {ref.name} {_split_label(split)} ({len(ref.runs)} seeds)",
        )
        ax.plot(band.steps, band.mean, color=color, linewidth=0.8, linestyle=":")


def _split_label(split: str) -> str:
    return split.replace("eval_test_", "eval ") if split != "train" else "train"


def _run_label(run: Run, runs: list[Run]) -> str:
    names = [r.name for r in runs]
    name = run.name if names.count(run.name) == 1 else str(run.job_dir)
    return f"{name} (seed {run.seed})" if run.seed is not None else name


def _title(runs: list[Run], ref: Reference | None) -> str:
    exps = sorted({(r.experiment or "?").rsplit(".", 1)[-1] for r in runs})
    text = ", ".join(exps)
    manifest = runs[0].manifest or {}
    if manifest.get("release"):
        text += f"  ·  release {manifest['release']}"
    if manifest.get("lock_sha256"):
        text += f" (lock {manifest['lock_sha256'][:12]})"
    if ref is not None:
        text += (
            f"  ·  band: {ref.name}, {len(ref.runs)} recorded runs, light rim = compare tolerance"
        )
    return text
