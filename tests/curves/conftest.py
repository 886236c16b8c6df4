"""Synthetic job directories: metrics.jsonl (+ config.json, manifest.json) like the trainer's."""

import json
import math

import pytest

EXP = "tasks.lm.params.lm_cloud.LmCloudSpmdTiny"
EVAL = "eval_test_embedded"


def curve(step: int, seed: int, scale: float = 1.0) -> float:
    """A falling loss, a little different per seed."""
    return 1.5 + 4.0 * math.exp(-step / 40) + 0.02 * seed * scale


def write_run(
    path,
    seed=1,
    steps=range(0, 151, 10),
    eval_steps=(50, 100, 150),
    rows=None,
    shift=0.0,
    experiment=EXP,
    lock="a" * 64,
):
    path.mkdir(parents=True, exist_ok=True)
    if rows is None:
        rows = []
        for step in steps:
            v = curve(step, seed) + shift
            rows.append(
                {
                    "split": "train",
                    "step": step,
                    "loss": v,
                    "log_pplx": v,
                    "grad_norm": 1.0,
                    "step_time_s": None,
                }
            )
            if step in eval_steps:
                rows.append(
                    {
                        "split": EVAL,
                        "step": step,
                        "loss": v + 0.1,
                        "log_pplx": v + 0.1,
                        "accuracy": 0.5,
                    }
                )
    with open(path / "metrics.jsonl", "w") as f:
        for row in rows:
            f.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    (path / "config.json").write_text(
        json.dumps({"experiment": experiment, "task": {"train": {"seed": seed}}})
    )
    (path / "manifest.json").write_text(
        json.dumps(
            {
                "release": "1.4.0",
                "lockfile": "releases/1.4.0/cpu.txt",
                "lock_sha256": lock,
                "git_revision": "abc",
                "headline_packages": {"jax": "0.10.2"},
            }
        )
    )
    return path


@pytest.fixture
def make_run(tmp_path):
    def make(name="run", **kwargs):
        return write_run(tmp_path / name, **kwargs)

    return make


@pytest.fixture
def reference_file(tmp_path, make_run):
    """A reference recorded from three synthetic seeds."""
    from pax.curves import record

    dirs = [make_run(f"ref{s}", seed=s) for s in (1, 2, 3)]
    out = tmp_path / "Tiny.json"
    record.record(
        dirs,
        "Tiny",
        [f"train --set=SEED={s}" for s in (1, 2, 3)],
        out,
        recorded_by="test",
        root=tmp_path,
    )
    return out
