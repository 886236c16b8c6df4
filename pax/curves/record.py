"""Turning finished runs into a reference JSON (`./noxw -s references` runs them, then this).

Each recorded run keeps its curves and where it came from: the command that trained it,
the release and the sha256 of the lockfile its environment was built from (manifest.json),
the headline package versions, the devices, the git revision and the wall time; where the
environment held every pin of that lock and other packages besides (a machine's own Python
with the release's pins installed), the state `superset` and those other packages. The seeds'
runs make the band; `calibration` runs (held-out seeds, broken runs) are kept beside it to
test the band's verdict and are never part of it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from pathlib import Path

from pax.curves.job_dir import CurvesError, read_run
from pax.curves.reference import ALPHA, TRAIN_WINDOW, Reference, flat_config
from pax.lockfile import difference_text
from pax.train import manifest as history

MANIFEST_KEYS = ("release", "lock_sha256", "git_revision", "python", "headline_packages", "devices")


@dataclasses.dataclass
class Recorded:
    """A finished run to record: its job directory and the command that trained it."""

    job_dir: str | Path
    command: str
    wall_s: float | None = None
    fault: dict | None = None  # calibration: how it was broken ({name, description})


def _relative(path: str | None, root: Path) -> str | None:
    if not path:
        return path
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        pass
    # A lockfile of another checkout (a shared env built elsewhere): its place in the repo.
    parts = Path(path).parts
    if "releases" in parts:
        return str(Path(*parts[len(parts) - 1 - parts[::-1].index("releases") :]))
    return path


def _pinned_env(job_dir, manifest: dict) -> dict:
    """What a run's environment adds to its entry: its state against the lock it names, and
    the packages installed beside that lock's pins. A run whose pins differ from its lock
    (drifted), or that names no lock (unpinned), is refused: a reference says which environment
    made it. A manifest without the environment's state (an older Pax's) adds nothing."""
    env = manifest.get("env") or {}
    state, rows = env.get("state"), env.get("differences") or []
    if state in ("drifted", "unpinned"):
        shown = "; ".join(difference_text(r) for r in rows[:3])
        more = f" and {len(rows) - 3} more" if len(rows) > 3 else ""
        against = env.get("compared_with") or {}
        lock = f"release {against.get('release')} {against.get('platform')}"
        raise CurvesError(
            f"{job_dir}: its environment is {state} ({len(rows)} differences from {lock}: "
            f"{shown}{more}); a reference needs every pin of a "
            "release's lock installed at its version: train it in the release's env"
        )
    if state is None:
        return {}
    extras = {r["package"]: r["installed"] for r in rows if r["kind"] == "extra"}
    return {"env_state": state, **({"other_packages": extras} if extras else {})}


def _entry(rec: Recorded, root: Path) -> tuple[dict, dict, str | None]:
    run = read_run(rec.job_dir)
    manifest = run.manifest or {}
    env = _pinned_env(rec.job_dir, manifest)
    if not manifest.get("lock_sha256"):
        raise CurvesError(
            f"{rec.job_dir}: no manifest.json with lock_sha256; a reference must "
            f"say which environment made it"
        )
    if run.config is None:
        raise CurvesError(f"{rec.job_dir}: no config.json; a reference must say what ran")
    segments = history.segments(manifest)
    if len(segments) > 1:
        raise CurvesError(
            f"{rec.job_dir}: trained in {len(segments)} environments "
            f"({', '.join(history.name(s) for s in segments)}); a reference run must come from "
            "one: train it again in a new job directory"
        )
    config = flat_config(run.config)
    entry = {
        "seed": run.seed,
        "command": rec.command,
        "job_dir": _relative(str(run.job_dir), root),
        "lockfile": _relative(manifest.get("lockfile"), root),
        **{key: manifest.get(key) for key in MANIFEST_KEYS},
        **env,
        "num_train_steps": config.get("task.train.num_train_steps"),
        "wall_s": rec.wall_s,
        **({"fault": rec.fault or run.fault} if (rec.fault or run.fault) else {}),
        "curves": run.curves,
    }
    return entry, config, run.experiment


def record(
    seeds: list[Recorded],
    name: str,
    out: str | Path,
    recorded_by: str = "",
    root: str | Path = ".",
    alpha: float = ALPHA,
    train_window: int = TRAIN_WINDOW,
    calibration: dict[str, list[Recorded]] | None = None,
) -> Reference:
    """Write the reference `out` from finished runs; returns it.

    The seeds must share one experiment and config (seeds aside); calibration runs
    (`held_out`: other seeds of that config, `broken`: runs that must fail) may differ.
    """
    root = Path(root)
    runs, configs, experiments = [], [], set()
    for rec in seeds:
        entry, config, experiment = _entry(rec, root)
        runs.append(entry)
        configs.append(config)
        experiments.add(experiment)
    if len(experiments) != 1 or None in experiments:
        raise CurvesError(
            f"record: the runs must be of one experiment (config.json), got "
            f"{sorted(map(str, experiments))}"
        )
    experiment = experiments.pop()
    for rec, config in zip(seeds, configs):
        if config != configs[0]:
            diff = sorted(
                k for k in set(config) | set(configs[0]) if config.get(k) != configs[0].get(k)
            )
            raise CurvesError(
                f"record: {rec.job_dir} ran another config than {seeds[0].job_dir} "
                f"({', '.join(diff[:3])}); a band is for one config"
            )
    cal = {
        kind: [_entry(rec, root)[0] for rec in recs] for kind, recs in (calibration or {}).items()
    }
    ref = Reference(
        name=name,
        experiment=experiment,
        runs=runs,
        config=configs[0],
        alpha=alpha,
        train_window=train_window,
        calibration=cal,
        recorded_by=recorded_by,
        recorded_at=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    ref.write(out)
    return ref
