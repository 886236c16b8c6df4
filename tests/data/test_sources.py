"""The embedded corpus's splits: training windows follow SEED, eval windows do not."""

import dataclasses

import numpy as np

from pax.data import sources
from pax.experiments import base, registry
from pax.experiments.config import DatasetConfig


def _config(seed, is_training):
    return DatasetConfig(
        name="train" if is_training else "embedded",
        source="embedded",
        is_training=is_training,
        seq_len=32,
        seed=seed,
    )


def _eval_split(seed):
    """The tiny experiment's eval split as the trainer builds it, with SEED set."""
    exp = type("Seeded", (registry.get("LmCloudSpmdTiny"),), {"SEED": seed})
    _, eval_split = base.datasets(base.resolve(exp).task)
    return sources.build(eval_split, 256)


def test_eval_windows_are_the_same_for_every_seed():
    a = _eval_split(1).batch(0, 4)
    b = _eval_split(2).batch(0, 4)
    np.testing.assert_array_equal(a["inputs"], b["inputs"])
    later = _eval_split(1).batch(1, 4)  # batch 1 is other text
    assert not np.array_equal(a["inputs"], later["inputs"])


def test_training_windows_follow_the_seed_and_stay_out_of_the_eval_text():
    one = sources.build(_config(1, True), 256)
    two = sources.build(dataclasses.replace(_config(1, True), seed=2), 256)
    assert not np.array_equal(one.batch(0, 4)["inputs"], two.batch(0, 4)["inputs"])
    np.testing.assert_array_equal(one.batch(3, 4)["inputs"], one.batch(3, 4)["inputs"])
    held_out = sources.build(_config(1, False), 256).tokens
    assert abs(len(held_out) / (len(held_out) + len(one.tokens)) - sources.EVAL_FRACTION) < 1e-4
