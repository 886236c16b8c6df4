"""Turning finished runs into a reference JSON (`./noxw -s references` runs the seeds, then this).

Each recorded run keeps its curves and where it came from: the command that trained it,
the release and the sha256 of the lockfile its environment was built from (manifest.json),
the headline package versions, the git revision and the wall time.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from pax.curves.reference import Reference
from pax.curves.runs import CurvesError, read_run

MANIFEST_KEYS = ("release", "lock_sha256", "git_revision", "python", "headline_packages", "devices")


def _relative(path: str | None, root: Path) -> str | None:
    if not path:
        return path
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return path


def record(
    job_dirs: list[str | Path],
    name: str,
    commands: list[str],
    out: str | Path,
    recorded_by: str = "",
    wall_s: list[float | None] | None = None,
    root: str | Path = ".",
    band_kind: str = "minmax",
    k: float = 2.0,
) -> Reference:
    """Write the reference `out` from finished runs; returns it. commands[i] trained job_dirs[i]."""
    if len(commands) != len(job_dirs):
        raise CurvesError("record: one command per job directory")
    root = Path(root)
    runs, experiments = [], set()
    for i, job_dir in enumerate(job_dirs):
        run = read_run(job_dir)
        manifest = run.manifest or {}
        if not manifest.get("lock_sha256"):
            raise CurvesError(
                f"{job_dir}: no manifest.json with lock_sha256; a reference must "
                f"say which environment made it"
            )
        experiments.add(run.experiment)
        runs.append(
            {
                "seed": run.seed,
                "command": commands[i],
                "job_dir": _relative(str(run.job_dir), root),
                "lockfile": _relative(manifest.get("lockfile"), root),
                **{key: manifest.get(key) for key in MANIFEST_KEYS},
                "wall_s": None if not wall_s else wall_s[i],
                "curves": run.curves,
            }
        )
    if len(experiments) != 1 or None in experiments:
        raise CurvesError(
            f"record: the runs must be of one experiment (config.json), got "
            f"{sorted(map(str, experiments))}"
        )
    ref = Reference(
        name=name,
        experiment=experiments.pop(),
        runs=runs,
        band_kind=band_kind,
        k=k,
        recorded_by=recorded_by,
        recorded_at=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    ref.write(out)
    return ref
