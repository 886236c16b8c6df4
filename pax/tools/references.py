"""Recording a reference band: train each seed afresh in a release's pinned env, one after
another, then write pax/curves/references/<Experiment>.json from the finished runs.

Runs from nox's tools venv (`./noxw -s references`): it imports no jax and starts the trainer
as a subprocess of the env's python.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from pathlib import Path

from pax.curves import CurvesError
from pax.curves import record as curves_record
from pax.curves.reference import Reference

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SEEDS = (1, 2, 3)


def parse_seeds(text: str) -> list[int]:
    """`1,2,3` -> [1, 2, 3]; CurvesError unless at least two distinct integers."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise CurvesError(f"--seeds takes integers like 1,2,3, not {text!r}") from None
    if len(seeds) < 2 or len(set(seeds)) != len(seeds):
        raise CurvesError(f"a band needs at least two distinct seeds, got {text!r}")
    return seeds


def record(
    python: Path,
    env: dict[str, str],
    release: str,
    experiment: str,
    seeds: list[int],
    out: Path | None = None,
    log=print,
) -> Reference:
    """Train `experiment` once per seed with `python` (a release env's) and record the band."""
    name = experiment.rsplit(".", 1)[-1]
    out = out or ROOT / "pax" / "curves" / "references" / f"{name}.json"
    job_dirs, commands, walls = [], [], []
    for seed in seeds:
        job_dir = Path("runs") / "references" / name / f"seed{seed}"
        shutil.rmtree(ROOT / job_dir, ignore_errors=True)  # a fresh run, never a resume
        flags = [f"--exp={experiment}", f"--job_log_dir={job_dir}", f"--set=SEED={seed}"]
        start = time.monotonic()
        if subprocess.run([str(python), "-m", "pax.main", *flags], cwd=ROOT, env=env).returncode:
            raise CurvesError(f"seed {seed}: training failed; see its log above ({job_dir})")
        walls.append(round(time.monotonic() - start, 1))
        log(f"references: seed {seed} took {walls[-1]:.0f} s")
        job_dirs.append(ROOT / job_dir)
        commands.append(shlex.join(["./noxw", "-s", "train", "--", release, "cpu", *flags]))
    recorded_by = shlex.join(
        [
            "./noxw",
            "-s",
            "references",
            "--",
            release,
            f"--exp={experiment}",
            f"--seeds={','.join(map(str, seeds))}",
        ]
    )
    return curves_record.record(
        job_dirs, name, commands, out, recorded_by=recorded_by, wall_s=walls, root=ROOT
    )
