"""The upgrade path: a run trained under the newest release on Python 3.11 continues under the
newest release on a later Python (another jax, orbax and numpy) from its last checkpoint, as a
new segment of its job directory, and its loss goes on as if nothing had changed."""

import json
import os
import subprocess
import sys

import pytest

from pax import interpreters
from pax.environments import venv
from pax.paths import ROOT
from pax.releases import catalog

EXP = "tasks.lm.params.lm_cloud.LmCloudSpmdTiny"


def _releases():
    """(old, new): the newest release on 3.11 and the newest one; skipped where they share a
    Python or this machine lacks the new one's."""
    releases = catalog.list_releases()
    old = [r for r in releases if r.pythons == ("3.11",)][-1]
    new = releases[-1]
    if new.python == old.python:
        pytest.skip(f"release {new.version} is on Python {old.python} too")
    if not any(interpreters.find(v) for v in new.pythons):
        pytest.skip(f"no Python {' or '.join(new.pythons)} on this machine")
    return old, new


def _train(env: venv.Env, job_dir, *flags):
    run_env = {**os.environ, **env.session_env(), "XLA_FLAGS": ""}
    return subprocess.run(
        [str(env.python), "-m", "pax.main", f"--exp={EXP}", f"--job_log_dir={job_dir}", *flags],
        env=run_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


@pytest.mark.slow  # two envs and 150 training steps; no fast test crosses releases
def test_a_run_trained_under_the_old_release_continues_under_the_new_one(tmp_path):
    old, new = _releases()
    old_env = venv.ensure(old, "cpu", log=lambda _: None)
    new_env = venv.ensure(new, "cpu", log=lambda _: None)
    job = tmp_path / "tiny"

    first = _train(old_env, job, "--set=NUM_TRAIN_STEPS=100")
    assert first.returncode == 0, first.stderr[-2000:]
    refused = _train(new_env, job)
    assert refused.returncode == 2
    assert "--allow_env_change" in refused.stderr.strip().splitlines()[-1]
    second = _train(new_env, job, "--allow_env_change")
    assert second.returncode == 0, second.stderr[-2000:]

    segments = json.loads((job / "manifest.json").read_text())["segments"]
    assert [(s["release"], s["from_step"]) for s in segments] == [
        (old.version, 0),
        (new.version, 100),
    ]
    assert segments[0]["python"].startswith("3.11.")
    assert segments[1]["python"].rsplit(".", 1)[0] in new.pythons
    assert segments[0]["headline_packages"]["jax"] != segments[1]["headline_packages"]["jax"]

    # The seam: the continued curve is judged by the shipped band like any other run (the
    # checks straddle step 100), so a jump beyond the seeds' spread is OUTSIDE.
    verdict = subprocess.run(
        [sys.executable, "-m", "pax.curves", "compare", str(job)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert verdict.returncode == 0, verdict.stdout[-2000:] + verdict.stderr[-500:]
    assert "INSIDE" in verdict.stdout
