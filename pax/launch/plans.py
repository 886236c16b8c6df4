"""Whether a TPU slice is known to work for an experiment: the TPU compiler's plans that
`./noxw -s aot` recorded (docs/aot.json), read as data (pax.aot itself imports jax).

A JobSet asks for a slice; whether the trainer's step compiles and fits there is what aot
finds out without the slice. A slice with no recorded plan that fits is not refused (the plan
may simply not have been made), but it is not known to work either, and the cluster command
says so.
"""

from __future__ import annotations

import json
from pathlib import Path

from pax import paths
from pax.errors import UsageError
from pax.launch import tpu_slices

AOT_JSON = paths.ROOT / "docs" / "aot.json"


def slice_name(record: dict) -> str | None:
    """The canonical name (pax.launch.tpu_slices) of the TPU slice a record of aot's planned
    for, whichever spelling it was recorded under; None for a GPU plan."""
    if record.get("platform", "tpu") != "tpu":
        return None
    try:
        return tpu_slices.parse(record["target"]["slice"]).name
    except UsageError:
        return None


def records(path: Path | None = None) -> list[dict]:
    """aot's recorded plans; [] where there are none (an installed pax has no docs/)."""
    try:
        return json.loads((path or AOT_JSON).read_text())
    except FileNotFoundError:
        return []


def warning(
    exp: str, sets: list[str], tpu_slice: str, topology: str, path: Path | None = None
) -> str | None:
    """None when a recorded TPU plan of `exp` with `sets` on this slice and topology fits; else
    what is known, and the command that plans it."""
    found = tpu_slices.parse(tpu_slice)
    generation = found.generation.chip
    plans = [
        r
        for r in records(path)
        if r["experiment"] == exp
        and sorted(r.get("sets", [])) == sorted(sets)
        and slice_name(r) == found.name
        and (r["target"].get("topology") or "").startswith(f"{generation}:")
    ]
    short = exp.rsplit(".", 1)[-1]
    check = f"./noxw -s aot -- {short}{''.join(f' --set {s}' for s in sets)} --tpu {found.name}"
    if not plans:
        return (
            f"{short} on {tpu_slice} (topology {topology}) is not known to work: no TPU plan of "
            f"it is recorded; check it first with `{check}`"
        )
    plan = plans[-1]
    if plan["target"]["topology"] != f"{generation}:{topology}":
        return (
            f"{short} was planned on {plan['target']['topology']}, this JobSet asks for "
            f"{topology}; check it with `{check}`"
        )
    if not plan["fits"]:
        why = plan.get("compile_error") or "its per-chip memory exceeds the chip's"
        return f"{short} does not fit {tpu_slice} by the TPU compiler's plan ({why[:160]})"
    return None
