"""Reading a job directory's metrics.jsonl (and what its config/manifest say about the run).

metrics.jsonl holds one JSON object per line, `{"split": ..., "step": N, "loss": ..., ...}`,
appended as the run goes. After a resume the steps since the restored checkpoint are trained
again and appear twice; the later row wins. A line cut off by a kill (only ever the last one)
is skipped and counted, never fatal.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from pax import errors

METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.json"  # written by the trainer before its first step
FAULT_FILE = "fault.json"  # written by pax.curves.faults into a run it broke on purpose


class CurvesError(errors.UsageError, ValueError):
    """Bad input: a missing job directory, no metrics, an unknown or malformed reference."""


class CannotJudge(errors.CannotJudge, CurvesError):
    """A run that is there but cannot be judged yet: started (its config.json written) but no
    metrics logged, or stopped before its last check.

    compare exits 125 on it (`git bisect run`'s "skip"): the run says nothing about the curve
    either way. A path that is no job directory at all (missing, mistyped, a folder without
    config.json or metrics.jsonl) is a CurvesError, exit 2: a wrong command line is the same at
    every bisect step, so skipping would hide it."""


@dataclasses.dataclass
class Run:
    """One run's curves: curves[split][metric] = {step: value}, steps ascending."""

    job_dir: Path
    curves: dict[str, dict[str, dict[int, float]]]
    experiment: str | None = None  # from config.json
    seed: int | None = None  # from config.json
    manifest: dict | None = None  # manifest.json, as written by the trainer
    config: dict | None = None  # config.json: the resolved config the run trained with
    fault: dict | None = None  # fault.json: a deliberately broken run (pax.curves.faults)
    skipped_lines: int = 0  # lines that were not a JSON object with split and step

    @property
    def name(self) -> str:
        return self.job_dir.name

    def series(self, split: str, metric: str) -> dict[int, float]:
        return self.curves.get(split, {}).get(metric, {})

    def splits(self) -> list[str]:
        return sorted(self.curves, key=lambda s: (s != "train", s))


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def read_metrics(path: str | Path) -> tuple[dict[str, dict[str, dict[int, float]]], int]:
    """(curves, skipped_lines) from one metrics.jsonl; the last row of a repeated step wins.

    Non-finite values (a NaN loss) are kept as they are: compare treats them as outside.
    """
    path = Path(path)
    rows: dict[tuple[str, int], dict] = {}
    skipped = 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except ValueError:
                skipped += 1
                continue
            if not isinstance(row, dict):
                skipped += 1
                continue
            split, step = row.get("split"), row.get("step")
            if not isinstance(split, str) or isinstance(step, bool) or not isinstance(step, int):
                skipped += 1
                continue
            rows[(split, step)] = row  # a resumed run's later row replaces the earlier one
    curves: dict[str, dict[str, dict[int, float]]] = {}
    for (split, step), row in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        for key, value in row.items():
            if key in ("split", "step"):
                continue
            number = _number(value)
            if number is not None:
                curves.setdefault(split, {}).setdefault(key, {})[step] = number
    return curves, skipped


def _json_or_none(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_run(job_dir: str | Path) -> Run:
    """The run in job_dir; CurvesError (one line) when there is nothing to read."""
    job_dir = Path(job_dir)
    if not job_dir.exists():
        raise CurvesError(
            f"{job_dir}: no such job directory; check the path (the --job_log_dir it trained "
            f"with, the folder holding {CONFIG_FILE} and {METRICS_FILE})"
        )
    if not job_dir.is_dir():
        raise CurvesError(
            f"{job_dir}: not a directory (give the job directory, the one holding {METRICS_FILE})"
        )
    path = job_dir / METRICS_FILE
    if not path.is_file():
        if not (job_dir / CONFIG_FILE).is_file():
            raise CurvesError(
                f"{job_dir}: not a job directory (no {CONFIG_FILE}, no {METRICS_FILE}); give "
                "the --job_log_dir a run trained with"
            )
        raise CannotJudge(f"{job_dir}: no {METRICS_FILE} yet (the run has not logged a step)")
    try:
        curves, skipped = read_metrics(path)
    except OSError as err:
        raise CurvesError(f"{path}: cannot read ({err.strerror or err})") from None
    if not curves:
        raise CannotJudge(f"{path}: no metric rows (empty, or not written by the trainer)")
    config = _json_or_none(job_dir / CONFIG_FILE) or {}
    seed = (
        (config.get("task") or {}).get("train", {}).get("seed")
        if isinstance(config.get("task"), dict)
        else None
    )
    return Run(
        job_dir=job_dir,
        curves=curves,
        experiment=config.get("experiment") if isinstance(config.get("experiment"), str) else None,
        seed=seed if isinstance(seed, int) else None,
        manifest=_json_or_none(job_dir / "manifest.json"),
        config=config or None,
        fault=_json_or_none(job_dir / FAULT_FILE),
        skipped_lines=skipped,
    )


def is_finite(value: float) -> bool:
    return isinstance(value, float) and math.isfinite(value)
