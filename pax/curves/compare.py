"""The verdict: is a run one more healthy seed of its reference, or did its numerics move?

A reference (pax.curves.reference) holds, for each check (the eval loss at each eval step,
the train loss averaged over each window), the mean m and sample std s of n recorded seeds.
A run is judged on the J checks its length reaches: its deviation at a check is

    dev = (x - m) / s        (in seed-to-seed stds)

and it is OUTSIDE when any |dev| exceeds L = stats.tolerance(alpha, J, n), the Bonferroni-split
two-sided Student-t prediction limit: a healthy run (one more seed) is flagged with
probability at most alpha. The check with the largest |dev| / L decides, and the verdict
prints it with its margin (L - |dev|, in stds and in loss).

Exit statuses, usable as a bisect COMMAND: 0 inside, 1 outside (a NaN counts), 125 a run that
cannot be judged yet (started but no metrics, stopped before the checks it should reach;
`git bisect`'s skip). A path that is no job directory (missing, mistyped) or a run of another
experiment or config is not compared at all: that is bad input (CurvesError, exit 2), the same
on every bisect step.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from pax.curves import stats
from pax.curves.job_dir import CannotJudge, CurvesError, Run
from pax.curves.reference import RUN_LENGTH, Reference, Stat, config_differences, flat_config
from pax.train import manifest as history

INSIDE, OUTSIDE, CANNOT_JUDGE = 0, 1, 125


@dataclasses.dataclass(frozen=True)
class Row:
    stat: Stat
    value: float | None  # None: the run has not logged this check's steps
    dev: float  # (value - mean) / std; inf when not finite; nan when not logged
    limit: float

    @property
    def judged(self) -> bool:
        return self.value is not None

    @property
    def inside(self) -> bool:
        return self.judged and abs(self.dev) <= self.limit

    @property
    def closeness(self) -> float:  # |dev| / limit: > 1 outside
        return abs(self.dev) / self.limit if self.judged else -1.0

    def margin_text(self) -> str:
        s = self.stat.std
        spare = self.limit - abs(self.dev)
        loss = f" = {abs(spare) * s:.3f} {self.stat.check.metric}" if math.isfinite(spare) else ""
        if spare >= 0:
            return f"margin {spare:.2f} s{loss} to the limit"
        return f"past the limit by {-spare:.2f} s{loss}" if math.isfinite(spare) else "not finite"


@dataclasses.dataclass
class Verdict:
    code: int  # INSIDE, OUTSIDE or CANNOT_JUDGE
    rows: list[Row]
    lines: list[str]
    deciding: Row | None = None

    @property
    def ok(self) -> bool:
        return self.code == INSIDE

    @property
    def report(self) -> str:
        return "\n".join(self.lines)


def _dev(value: float, stat: Stat) -> float:
    if not math.isfinite(value):
        return math.inf
    if stat.std == 0.0:  # every seed gave the same value: only that value is inside
        return 0.0 if value == stat.mean else math.copysign(math.inf, value - stat.mean)
    return (value - stat.mean) / stat.std


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.4f}" if math.isfinite(x) else str(x)


def _env(manifest: dict | None) -> tuple[str, str, str]:
    """(release, platform, lock) of a manifest, a segment of one or a reference's run entry."""
    manifest = manifest or {}
    # The devices' platform: a manifest's own top-level `platform` is the OS's.
    platform = (manifest.get("devices") or {}).get("platform") or manifest.get("platform") or "?"
    return (
        str(manifest.get("release") or "?"),
        str(platform),
        str(manifest.get("lock_sha256") or "?")[:12],
    )


def run_platform(run: Run) -> str:
    """The platform the run trained on last (its newest segment's devices), "cpu" if unsaid."""
    segments = history.segments(run.manifest) or [run.manifest]
    platform = _env(segments[-1])[1]
    return "cpu" if platform == "?" else platform


def _env_text(envs: list[tuple[str, str, str]]) -> str:
    return "; ".join(f"release {r} {p} (lock {lock})" for r, p, lock in sorted(set(envs)))


def _history_text(run: Run) -> str:
    """The environments that trained the run, with their steps when there were several."""
    segments = history.segments(run.manifest)
    if len(segments) < 2:
        return _env_text([_env(run.manifest)])
    last = max((max(c) for m in run.curves.values() for c in m.values() if c), default=0)
    parts = []
    for segment, after in zip(segments, [*segments[1:], None]):
        start = segment.get("from_step") or 0
        if segment.get("mode") == "eval":
            steps = f"evaluated step {start}"
        else:
            end = after.get("from_step") if after and after.get("mode") != "eval" else last
            steps = f"steps {start + 1}-{end}"
        parts.append(f"{_env_text([_env(segment)])} {steps}")
    return "; ".join(parts)


def _seeds_text(seeds: list) -> str:
    seeds = [s for s in seeds if s is not None]
    if seeds and seeds == list(range(seeds[0], seeds[0] + len(seeds))) and len(seeds) > 3:
        return f"seeds {seeds[0]}..{seeds[-1]}"
    return "seeds " + ", ".join(map(str, seeds)) if seeds else "seeds unknown"


def check_same_config(run: Run, ref: Reference) -> list[str]:
    """Refuse (CurvesError) a run of another experiment or config; notes for the rest."""
    if run.config is None:
        raise CannotJudge(
            f"{run.job_dir}: no config.json, so which experiment and config it ran is unknown"
        )
    if (run.experiment or "").rsplit(".", 1)[-1] != ref.experiment.rsplit(".", 1)[-1]:
        raise CurvesError(
            f"{run.job_dir} is a run of {run.experiment or '(no experiment)'}, the reference "
            f"{ref.name} is for {ref.experiment}: not comparable (pass --reference for its own)"
        )
    different, one_sided = config_differences(ref.config, flat_config(run.config))
    if different:
        more = f" and {len(different) - 2} more" if len(different) > 2 else ""
        raise CurvesError(
            f"{run.job_dir} ran another config than the reference {ref.name}'s: "
            f"{'; '.join(different[:2])}{more}: not comparable (re-record a band for it with "
            f"./noxw -s references)"
        )
    notes = []
    if one_sided:
        notes.append(
            f"note: config keys only one side has (a newer or older trainer): "
            f"{', '.join(one_sided[:3])}{' ...' if len(one_sided) > 3 else ''}"
        )
    return notes


def judge(
    run: Run,
    ref: Reference,
    alpha: float | None = None,
    partial: bool = False,
    check_config: bool = True,
    length: int | None = None,
) -> Verdict:
    """The verdict on `run` against `ref`; CurvesError when they are not comparable.

    check_config=False judges the curves alone (the calibration's broken runs, some of
    which break the config on purpose); `length` then says how many steps the run trained.
    """
    alpha = ref.alpha if alpha is None else alpha
    if not 0.0 < alpha < 1.0:
        raise CurvesError(f"the false-alarm rate must be in (0, 1), not {alpha}")
    notes = check_same_config(run, ref) if check_config else []
    if length is None:
        length = flat_config(run.config or {}).get(RUN_LENGTH, ref.config.get(RUN_LENGTH))
    applicable = _applicable(run, ref, length)
    limit = stats.tolerance(alpha, len(applicable), ref.n)
    rows = []
    for stat in applicable:
        value = stat.check.value(run.curves)
        rows.append(Row(stat, value, math.nan if value is None else _dev(value, stat), limit))
    lines = [
        *_header(run, ref, alpha, len(applicable), limit),
        *_notes(run, ref, length, len(applicable)),
        *(f"  {note}" for note in notes),
        *_table(rows),
    ]
    code, conclusion, deciding = _conclusion(rows, limit, partial)
    return Verdict(code, rows, [*lines, conclusion], deciding)


def _applicable(run: Run, ref: Reference, length: int | None) -> list[Stat]:
    """The reference's checks a run of `length` steps reaches (all of them when unknown)."""
    applicable = [s for s in ref.stats if length is None or s.check.last <= length]
    if not applicable:
        first = min(s.check.last for s in ref.stats)
        raise CurvesError(
            f"{run.job_dir} trains {length} steps, before the reference's first check "
            f"(step {first}); train at least {first} steps"
        )
    return applicable


def _header(run: Run, ref: Reference, alpha: float, j: int, limit: float) -> list[str]:
    """What is compared with what, in which environments, under which rule."""
    n = ref.n
    return [
        f"compare {run.job_dir} with reference {ref.name} ({n} {_seeds_text(ref.seeds())}, "
        f"recorded {ref.recorded_at or '?'})",
        f"  band: {_env_text([_env(r) for r in ref.runs])}",
        f"  run:  {_history_text(run)}" + (f", seed {run.seed}" if run.seed is not None else ""),
        f"  rule: flagged when any of {j} checks strays more than {limit:.2f} s from the seeds' "
        f"mean (s: their std there); a healthy run is flagged with probability <= "
        f"{100 * alpha:g}% (Student's t, {n - 1} dof, Bonferroni over {j} checks)",
    ]


def _notes(run: Run, ref: Reference, length: int | None, j: int) -> list[str]:
    """What a reader should know before trusting the comparison: a shorter run, another lock
    or platform, a fault injected on purpose, unreadable metrics."""
    band_length = ref.config.get(RUN_LENGTH)
    band_env = [_env(r) for r in ref.runs]
    run_envs = [_env(segment) for segment in history.segments(run.manifest)] or [_env(None)]
    lines = []
    if length is not None and band_length is not None and length < band_length:
        lines.append(
            f"  note: the run trains {length} of the band's {band_length} steps: judged on the "
            f"{j} checks it reaches"
        )
    if {e[2] for e in run_envs} - {e[2] for e in band_env}:
        lines.append(
            "  note: the run's lock differs from the band's: compared all the same (the same "
            "math where the platform is the same); outside means the curve moved with it"
        )
    run_platforms = {e[1] for e in run_envs} - {e[1] for e in band_env} - {"?"}
    if run_platforms:
        lines.append(
            f"  note: the band was recorded on {'/'.join(sorted({e[1] for e in band_env}))}, "
            f"the run ran on {'/'.join(sorted(run_platforms))}: other kernels, other rounding"
        )
    if run.fault:
        lines.append(
            f"  note: this run was broken on purpose: {run.fault.get('name')} "
            f"({run.fault.get('description', '')})"
        )
    if run.skipped_lines:
        lines.append(f"  note: {run.skipped_lines} unreadable line(s) in metrics.jsonl skipped")
    return lines


def _table(rows: list[Row]) -> list[str]:
    width = max(len(r.stat.check.label) for r in rows)
    lines = [f"  {'check':<{width}}  {'run':>8}  {'mean':>8}  {'s':>7}  {'dev (s)':>8}"]
    for r in rows:
        dev = "not logged" if not r.judged else (f"{r.dev:+.2f}" if math.isfinite(r.dev) else "inf")
        flag = "" if not r.judged or r.inside else "  OUTSIDE"
        lines.append(
            f"  {r.stat.check.label:<{width}}  {_fmt(r.value):>8}  {r.stat.mean:>8.4f}  "
            f"{r.stat.std:>7.4f}  {dev:>8}{flag}"
        )
    return lines


def _conclusion(rows: list[Row], limit: float, partial: bool) -> tuple[int, str, Row | None]:
    """(exit code, the verdict's last line, the deciding check)."""
    judged = [r for r in rows if r.judged]
    missing = [r for r in rows if not r.judged]
    outside = [r for r in judged if not r.inside]
    deciding = max(judged, key=lambda r: r.closeness) if judged else None
    if outside:  # the deciding check is then the one furthest past the limit
        return (
            OUTSIDE,
            f"OUTSIDE: {len(outside)} of {len(judged)} checks; deciding: "
            f"{_decision(deciding, limit)}",
            deciding,
        )
    if not judged or (missing and not partial):
        what = ", ".join(r.stat.check.label for r in missing[:3])
        return (
            CANNOT_JUDGE,
            f"CANNOT JUDGE: the run has not logged {len(missing)} of the {len(rows)} checks its "
            f"config reaches ({what}{', ...' if len(missing) > 3 else ''}): it stopped early "
            f"or is still running (--partial judges what it has)",
            deciding,
        )
    so_far = f" (the {len(judged)} logged so far)" if missing else ""
    return (
        INSIDE,
        f"INSIDE: all {len(judged)} checks{so_far}; deciding (closest to its limit): "
        f"{_decision(deciding, limit)}",
        deciding,
    )


def _decision(row: Row, limit: float) -> str:
    dev = f"{row.dev:+.2f} s" if math.isfinite(row.dev) else "not finite"
    return (
        f"{row.stat.check.label} = {_fmt(row.value)} vs mean {row.stat.mean:.4f}, "
        f"{dev} of the allowed ±{limit:.2f} s; {row.margin_text()}"
    )


def recorded_run(entry: dict, ref: Reference) -> Run:
    """A run stored in a reference (its curves and where it came from) as a Run."""
    return Run(
        job_dir=Path(entry.get("job_dir") or "?"),
        curves=entry["curves"],
        experiment=ref.experiment,
        seed=entry.get("seed"),
        manifest={k: entry.get(k) for k in ("release", "lock_sha256", "devices")},
        fault=entry.get("fault"),
    )


def judge_recorded(entry: dict, ref: Reference) -> Verdict:
    """The verdict on a run stored in a reference's calibration (curves only: a broken run
    may have changed the config on purpose)."""
    run = recorded_run(entry, ref)
    return judge(run, ref, check_config=False, length=entry.get("num_train_steps"))
