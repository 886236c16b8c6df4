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

AOT_JSON = paths.ROOT / "docs" / "aot.json"
# Cloud TPU names v5e slices v5litepod-N (chips); aot's records name them v5e-N.
_AOT_GENERATION = {"v5litepod": "v5e"}


def aot_slice(name: str) -> str:
    """`v5litepod-32` -> `v5e-32`, as aot's records name the slice; others are spelled alike."""
    generation, _, size = name.rpartition("-")
    return f"{_AOT_GENERATION.get(generation, generation)}-{size}"


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
    name, generation = aot_slice(tpu_slice), aot_slice(tpu_slice).rpartition("-")[0]
    plans = [
        r
        for r in records(path)
        if r["experiment"] == exp
        and sorted(r.get("sets", [])) == sorted(sets)
        and r["target"]["slice"] == name
        and (r["target"].get("topology") or "").startswith(f"{generation}:")
    ]
    short = exp.rsplit(".", 1)[-1]
    check = f"./noxw -s aot -- {short}{''.join(f' --set {s}' for s in sets)} --tpu {generation}"
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
