"""Drawing: runs' loss curves over a reference's acceptance regions, and the calibration chart.

The only module that imports matplotlib (the Agg canvas, no pyplot and no display).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from pax.curves import stats
from pax.curves.compare import Verdict
from pax.curves.job_dir import CurvesError, Run, read_run
from pax.curves.reference import CHECK_METRIC, Reference, load_reference, split_label

COLORS = ["C0", "C1", "C2", "C3", "C4", "C5", "C6", "C8", "C9"]


def _matplotlib():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise CurvesError(
            "drawing needs matplotlib, which this environment lacks; run it "
            "in the tools venv: ./noxw -s plot -- JOB_DIR..."
        ) from None
    return Figure


def _out(out_png) -> Path:
    out = Path(out_png)
    if out.suffix.lower() != ".png":
        raise CurvesError(f"{out}: the output must be a .png file")
    if not out.parent.is_dir():
        raise CurvesError(f"{out.parent}: no such directory for the PNG")
    return out


def _save(fig, out: Path) -> Path:
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        fig.savefig(tmp, format="png")
        tmp.replace(out)  # a half-drawn PNG is never left under the asked name
    finally:
        tmp.unlink(missing_ok=True)
    return out


def plot(job_dirs, out_png, reference=None, title: str | None = None) -> Path:
    """Draw the runs in job_dirs (paths or Run objects) into out_png; return its path.

    reference: None, a shipped reference name or .json path, or a Reference. With one, each
    check's acceptance region is drawn (a box over each train window, a bar at each eval
    step: the seeds' mean ± the verdict's limit), and each run's window means over its curve.
    """
    Figure = _matplotlib()
    runs = [r if isinstance(r, Run) else read_run(r) for r in job_dirs]
    if not runs:
        raise CurvesError("plot: no job directories given")
    ref = load_reference(reference) if isinstance(reference, (str, os.PathLike)) else reference
    out = _out(out_png)
    splits = list(dict.fromkeys(s for r in runs for s in r.splits() if r.series(s, CHECK_METRIC)))
    if ref is not None:
        splits = list(dict.fromkeys([*(s.check.split for s in ref.stats), *splits]))
    splits.sort(key=lambda s: (s != "train", s))
    fig = Figure(figsize=(6 * max(len(splits), 1), 4.8), dpi=110, layout="constrained")
    axes = fig.subplots(1, max(len(splits), 1), squeeze=False)[0]
    for ax, split in zip(axes, splits):
        _draw_split(ax, runs, ref, split)
    fig.suptitle(title or _title(runs, ref), fontsize=10)
    return _save(fig, out)


def _draw_split(ax, runs: list[Run], ref: Reference | None, split: str) -> None:
    if ref is not None:
        _draw_regions(ax, ref, split)
    for i, run in enumerate(runs):
        color = COLORS[i % len(COLORS)]
        series = run.series(split, CHECK_METRIC)
        if not series:
            continue
        steps = sorted(series)
        is_train = split == "train"
        ax.plot(
            steps,
            [series[s] for s in steps],
            color=color,
            linewidth=0.9 if is_train and ref is not None else 1.4,
            alpha=0.45 if is_train and ref is not None else 1.0,
            marker=None if is_train else "o",
            markersize=5,
            label=_run_label(run, runs),
        )
        if is_train and ref is not None:  # the window means the verdict judges
            for stat in ref.stats:
                if stat.check.split == split and stat.check.is_window:
                    v = stat.check.value(run.curves)
                    if v is not None:
                        a, b = stat.check.steps[0], stat.check.steps[-1]
                        ax.hlines(v, a, b, color=color, linewidth=2.4)
    ax.set_xlabel("step")
    ax.set_ylabel(CHECK_METRIC)
    ax.set_title(
        f"{split_label(split)} {CHECK_METRIC}"
        + (" (window means judged)" if split == "train" and ref else "")
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")


def _draw_regions(ax, ref: Reference, split: str) -> None:
    limit = stats.tolerance(ref.alpha, len(ref.stats), ref.n)
    color = "0.45" if split == "train" else "tab:purple"
    first = True
    for stat in ref.stats:
        if stat.check.split != split:
            continue
        lo, hi = stat.mean - limit * stat.std, stat.mean + limit * stat.std
        label = (
            f"{ref.name}: {ref.n} seeds' mean ± {limit:.2f} s (flags <= {100 * ref.alpha:g}% "
            f"of healthy runs)"
            if first
            else None
        )
        first = False
        if stat.check.is_window:
            a, b = stat.check.steps[0], stat.check.steps[-1]
            ax.fill_between(
                [a, b], [lo, lo], [hi, hi], color=color, alpha=0.25, linewidth=0, label=label
            )
            ax.hlines(stat.mean, a, b, color=color, linewidth=0.8, linestyle=":")
        else:
            step = stat.check.steps[0]
            ax.errorbar(
                [step],
                [stat.mean],
                yerr=[[stat.mean - lo], [hi - stat.mean]],
                color=color,
                capsize=6,
                linewidth=2,
                alpha=0.6,
                label=label,
            )


def _run_label(run: Run, runs: list[Run]) -> str:
    names = [r.name for r in runs]
    name = run.name if names.count(run.name) == 1 else str(run.job_dir)
    if run.fault:
        return f"{name} ({run.fault.get('name')})"
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
        text += f"  ·  band: {ref.name}, {ref.n} recorded seeds"
    return text


def plot_calibration(
    ref: Reference, verdicts: dict[str, list[tuple[str, Verdict]]], runs: list[Run], out_png
) -> Path:
    """The calibration runs' curves over the acceptance regions (top) and each one's deviation
    at every check in seed stds against the limit (bottom): the held-out seeds must stay
    inside, the broken runs must leave."""
    Figure = _matplotlib()
    out = _out(out_png)
    splits = sorted({s.check.split for s in ref.stats}, key=lambda s: (s != "train", s))
    fig = Figure(figsize=(6 * len(splits), 9.5), dpi=110, layout="constrained")
    grid = fig.add_gridspec(2, len(splits))
    for col, split in enumerate(splits):
        _draw_split(fig.add_subplot(grid[0, col]), runs, ref, split)
    ax = fig.add_subplot(grid[1, :])
    labels = [s.check.label for s in ref.stats]
    xs = list(range(len(labels)))
    limit = stats.tolerance(ref.alpha, len(ref.stats), ref.n)
    ax.axhspan(-limit, limit, color="0.85", label=f"inside: ±{limit:.2f} s (alpha {ref.alpha:g})")
    i, plotted = 0, []
    for kind, pairs in verdicts.items():
        for label, verdict in pairs:
            devs = {r.stat.check.label: r.dev for r in verdict.rows}
            ys = [_clip(devs.get(lbl, math.nan)) for lbl in labels]
            plotted += ys
            ax.plot(
                xs,
                ys,
                color=COLORS[i % len(COLORS)],
                linestyle="-" if kind == "held_out" else "--",
                marker="o" if kind == "held_out" else "x",
                alpha=0.85,
                label=f"{label}: {'pass' if verdict.ok else 'FAIL'}",
            )
            i += 1
    ax.set_yscale("symlog", linthresh=limit)  # linear inside the limit, logarithmic beyond
    top = max([abs(y) for y in plotted if not math.isnan(y)] + [limit])
    ticks = [t for t in (10.0, 100.0, 1000.0, 10000.0) if t < 2 * top]
    ax.set_yticks(
        [-limit, 0.0, limit, *ticks],
        [f"-{limit:.2f}", "0", f"{limit:.2f}", *map("{:g}".format, ticks)],
    )
    ax.set_xticks(xs, labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("deviation from the seeds' mean (seed stds)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    fig.suptitle(
        f"{ref.name}: band of {ref.n} seeds; held-out seeds and broken runs judged against it",
        fontsize=10,
    )
    return _save(fig, out)


def _clip(y: float) -> float:
    # A NaN or an infinite deviation (a NaN loss) is drawn at the edge of the chart.
    if math.isnan(y):
        return math.nan
    return y if math.isfinite(y) else math.copysign(1e4, y)
