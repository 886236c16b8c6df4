"""Synthetic job directories: metrics.jsonl, config.json, manifest.json like the trainer's.

A synthetic seed's loss is a smooth falling curve plus Gaussian noise drawn from
random.Random(seed): per-step noise on each logged train loss (one batch's loss) and a
per-run offset (the seed-to-seed spread of the model), so window means and eval points
behave as the real ones do, with a known distribution.
"""

import copy
import json
import math
import random

import pytest

EXP = "tasks.lm.params.lm_cloud.LmCloudSpmdTiny"
EVAL = "eval_test_embedded"
STEP_NOISE = 0.05  # a logged train loss's step-to-step noise
RUN_NOISE = 0.02  # a run's offset, shared by all its points

CONFIG = {
    "experiment": EXP,
    "task": {
        "model": {"vocab_size": 256, "num_layers": 4, "model_dims": 256},
        "optimizer": {
            "kind": "adam",
            "learning_rate": 0.003,
            "schedule": {"kind": "linear_rampup_cosine_decay", "warmup_steps": 20},
        },
        "train": {
            "num_train_steps": 150,
            "seed": 1,
            "summary_every_n_steps": 10,
            "eval_every_n_steps": 50,
            "checkpoint_every_n_steps": 50,
        },
        "data": {"data_source": "embedded", "training_seed": 1, "eval_seed": 0},
    },
    "datasets": [
        {"name": "train", "source": "embedded", "seed": 1, "data_dir": None},
        {"name": "embedded", "source": "embedded", "seed": 1, "data_dir": None},
    ],
}


def curve(step: int) -> float:
    """The noiseless falling loss."""
    return 1.5 + 4.0 * math.exp(-step / 40)


def config_for(seed=1, experiment=EXP, **train):
    config = copy.deepcopy(CONFIG)
    config["experiment"] = experiment
    config["task"]["train"].update(seed=seed, **train)
    config["task"]["data"]["training_seed"] = seed  # derived from SEED, as the trainer does
    for ds in config["datasets"]:
        ds["seed"] = seed
    return config


def synthetic_rows(seed, steps=range(10, 151, 10), eval_steps=(50, 100, 150), shift=0.0):
    rng = random.Random(seed)
    offset = rng.gauss(0.0, RUN_NOISE)
    rows = []
    for step in steps:
        v = curve(step) + offset + rng.gauss(0.0, STEP_NOISE) + shift
        rows.append({"split": "train", "step": step, "loss": v, "log_pplx": v, "grad_norm": 1.0})
        if step in eval_steps:
            e = curve(step) + 0.1 + offset + rng.gauss(0.0, RUN_NOISE / 2) + shift
            rows.append({"split": EVAL, "step": step, "loss": e, "log_pplx": e, "accuracy": 0.5})
    return rows


def write_run(
    path,
    seed=1,
    rows=None,
    shift=0.0,
    experiment=EXP,
    lock="a" * 64,
    release="1.6.0",
    platform="cpu",
    config=None,
    **rows_kwargs,
):
    path.mkdir(parents=True, exist_ok=True)
    if rows is None:
        rows = synthetic_rows(seed, shift=shift, **rows_kwargs)
    with open(path / "metrics.jsonl", "w") as f:
        for row in rows:
            f.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    if config is not False:
        (path / "config.json").write_text(json.dumps(config or config_for(seed, experiment)))
    (path / "manifest.json").write_text(
        json.dumps(
            {
                "release": release,
                "lockfile": f"releases/{release}/cpu.txt",
                "lock_sha256": lock,
                "git_revision": "abc",
                "headline_packages": {"jax": "0.10.2"},
                "devices": {"platform": platform, "count": 1},
                "platform": "Linux-6.1-x86_64-with-glibc2.36",  # the OS, as the trainer writes it
            }
        )
    )
    return path


@pytest.fixture
def make_run(tmp_path):
    def make(name="run", **kwargs):
        return write_run(tmp_path / name, **kwargs)

    return make


BAND_SEEDS = range(1, 11)


@pytest.fixture
def reference_file(tmp_path, make_run):
    """A reference recorded from ten synthetic seeds, with two held-out seeds and one broken
    run (shifted up) as its calibration."""
    from pax.curves import record

    def rec(name, **kw):
        return record.Recorded(make_run(name, **kw), f"train {name}", wall_s=1.0)

    out = tmp_path / "Tiny.json"
    record.record(
        [rec(f"ref{s}", seed=s) for s in BAND_SEEDS],
        "Tiny",
        out,
        recorded_by="test",
        root=tmp_path,
        calibration={
            "held_out": [rec(f"held{s}", seed=s) for s in (101, 102)],
            "broken": [
                record.Recorded(
                    make_run("broken", seed=103, shift=0.5),
                    "broken",
                    fault={"name": "shifted", "description": "loss + 0.5"},
                )
            ],
        },
    )
    return out
