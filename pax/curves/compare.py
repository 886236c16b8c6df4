"""Does a run stay inside its reference band?

Every (split, metric, step) the reference has a band for is checked against the run's value
there. The band is widened by a tolerance margin on each side,

    margin = max(k · sigma, atol, rtol · |band mean at that step|)

sigma being the curve's pooled seed-to-seed std recorded with the band (defaults: k 2,
atol 0.02, rtol 0), because three seeds cannot show the full spread of healthy runs: the
tiny experiment's train loss is one batch's loss, and a fresh seed lands up to ~2.3 sigma
from the recorded mean at some step while still being a healthy run.
A NaN or Inf is always outside. A run that lacks some of the band's steps fails too (it
stopped early, or logs at other steps) unless partial=True, which checks only the steps it
has, for a run still in progress.
"""

from __future__ import annotations

import dataclasses
import math

from pax.curves.reference import Reference
from pax.curves.runs import Run

K_SIGMA = 2.0
ATOL = 0.02
RTOL = 0.0
MAX_LISTED = 8


@dataclasses.dataclass(frozen=True)
class Tolerance:
    k: float = K_SIGMA
    atol: float = ATOL
    rtol: float = RTOL

    def margin(self, center: float, sigma: float = 0.0) -> float:
        return max(self.k * sigma, self.atol, self.rtol * abs(center))

    def __str__(self) -> str:
        parts = [f"{self.k:g}·sigma", f"{self.atol:g}"]
        if self.rtol:
            parts.append(f"{100 * self.rtol:g}% of the band mean")
        return f"band widened by max({', '.join(parts)}) on each side"


def _fmt(x: float) -> str:
    return f"{x:.4f}" if math.isfinite(x) else str(x)


def _describe_ref(ref: Reference) -> str:
    seeds = [r.get("seed") for r in ref.runs]
    seeds_text = ", ".join(str(s) for s in seeds if s is not None)
    kind = "min..max" if ref.band_kind == "minmax" else f"mean ± {ref.k:g}·std"
    return (
        f"{ref.name} ({len(ref.runs)} runs{', seeds ' + seeds_text if seeds_text else ''}; "
        f"band {kind} across runs)"
    )


def compare(
    run: Run, ref: Reference, tolerance: Tolerance | None = None, partial: bool = False
) -> tuple[bool, str]:
    """(ok, report): ok when every checked point lies inside the widened band."""
    tol = tolerance or Tolerance()
    lines = [f"compare {run.job_dir} with reference {_describe_ref(ref)}", f"  tolerance {tol}"]
    if run.experiment and run.experiment.rsplit(".", 1)[-1] != ref.experiment.rsplit(".", 1)[-1]:
        lines.append(f"  note: the run is {run.experiment}, the reference is {ref.experiment}")
    run_lock = (run.manifest or {}).get("lock_sha256")
    ref_locks = {r.get("lock_sha256") for r in ref.runs} - {None}
    if run_lock and ref_locks and run_lock not in ref_locks:
        lines.append(
            f"  note: the run's lock sha256 {run_lock[:12]} differs from the "
            f"reference's {', '.join(sorted(x[:12] for x in ref_locks))} "
            f"(another release or platform)"
        )
    if run.skipped_lines:
        lines.append(f"  note: {run.skipped_lines} unreadable line(s) in metrics.jsonl skipped")
    outside: list[str] = []
    missing: list[str] = []
    checked = 0
    for (split, metric), band in ref.bands.items():
        series = run.series(split, metric)
        inside = 0
        worst = None  # (how far past the widened edge, in margins; description)
        absent = [s for s in band.steps if s not in series]
        for step, lo, hi, mean in zip(band.steps, band.lo, band.hi, band.mean):
            if step not in series:
                continue
            value = series[step]
            checked += 1
            m = tol.margin(mean, band.sigma)
            low, high = lo - m, hi + m
            if not math.isfinite(value) or value < low or value > high:
                side = ">" if math.isfinite(value) and value > high else "<"
                edge = high if side == ">" else low
                outside.append(
                    f"{split} {metric} step {step}: {_fmt(value)} {side} "
                    f"{_fmt(edge)} (band {_fmt(lo)}..{_fmt(hi)}, margin {m:.3f})"
                )
            else:
                inside += 1
            over = (max(value - hi, lo - value) / m) if math.isfinite(value) else math.inf
            if worst is None or over > worst[0]:
                worst = (over, step, value, lo, hi)
        present = len(band.steps) - len(absent)
        label = f"{split} {metric}"
        status = f"{inside}/{present} inside (sigma {band.sigma:.3f})"
        if absent:
            status += f", {len(absent)} step(s) not logged ({_steps(absent)})"
            missing.append(f"{label}: steps {_steps(absent)}")
        if worst is not None:
            over, step, value, lo, hi = worst
            where = (
                "inside min..max"
                if over <= 0
                else f"past min..max by {over:.2f} of the margin"
                if math.isfinite(over)
                else "not finite"
            )
            status += f"; worst: step {step} {_fmt(value)} vs {_fmt(lo)}..{_fmt(hi)} ({where})"
        lines.append(f"  {label:<28} {status}")
    ok = checked > 0 and not outside and (partial or not missing)
    if outside:
        lines.append(f"OUTSIDE: {len(outside)} of {checked} points outside the band:")
        lines += [f"  {o}" for o in outside[:MAX_LISTED]]
        if len(outside) > MAX_LISTED:
            lines.append(f"  ... and {len(outside) - MAX_LISTED} more")
    if missing and not partial:
        lines.append(
            "INCOMPLETE: the run has not logged every step the reference has "
            "(stopped early?); --partial checks only the steps it has"
        )
    if checked == 0:
        lines.append(
            "NOTHING TO COMPARE: the run shares no split, metric and step with the reference"
        )
    if ok:
        lines.append(
            f"OK: inside the band at all {checked} points" + (" logged so far" if missing else "")
        )
    return ok, "\n".join(lines)


def _steps(steps: list[int]) -> str:
    if len(steps) <= 6:
        return ", ".join(map(str, steps))
    return f"{steps[0]}, {steps[1]}, ..., {steps[-1]}"
