"""The pmap path (no ICI_MESH_SHAPE): same losses as SPMD; Flax single-file or tensorstore
checkpoints, both resuming exactly (the single-file checkpointer alone: tests/checkpoint)."""

import os

import numpy as np
import pytest

from pax.errors import UsageError
from pax.train import loop
from pax.train.instantiate import instantiate
from tests.helpers import Tiny, derive, read_metrics

# Both average the same examples' gradients; only the order of the float32 sums differs.
LOSS_RTOL = 1e-5

# One example per device: the global batch of the session's one-device run (conftest's tiny_job).
Pmap = derive(Tiny, ICI_MESH_SHAPE=None, PERCORE_BATCH_SIZE=1)


def _losses(job):
    return (
        [r["loss"] for r in read_metrics(job)],
        [r["loss"] for r in read_metrics(job, "eval_test_embedded")],
    )


@pytest.fixture(scope="module")
def spmd_losses(tiny_job):
    return _losses(tiny_job)


def test_pmap_matches_spmd_and_resumes_from_flax_file_checkpoints(tmp_path, spmd_losses):
    job = str(tmp_path / "job")
    run = instantiate(derive(Pmap, NUM_TRAIN_STEPS=3)())
    assert run.strategy == "pmap" and run.model.mesh is None
    loop.train(run, job, "pmap")
    # Pax's pmap layout without tensorstore: one Flax (msgpack) file per step.
    assert os.path.isfile(os.path.join(job, "checkpoints", "checkpoint_00000003"))
    loop.train(instantiate(Pmap()), job, "pmap")  # resumes at step 3
    train, evals = _losses(job)
    np.testing.assert_allclose(train, spmd_losses[0], rtol=LOSS_RTOL)
    np.testing.assert_allclose(evals, spmd_losses[1], rtol=LOSS_RTOL)


def test_pmap_with_tensorstore_writes_orbax_checkpoints_that_restore(tmp_path, spmd_losses):
    job = str(tmp_path / "job")
    run = instantiate(derive(Pmap, PMAP_USE_TENSORSTORE=True)())
    loop.train(run, job, "pmap")
    assert os.path.isdir(os.path.join(job, "checkpoints", "checkpoint_00000006", "state"))
    restored = loop.evaluate(run, job, "pmap")  # the step-6 state, read back through orbax
    assert restored["eval_test_embedded"]["loss"] == pytest.approx(
        spmd_losses[1][-1], rel=LOSS_RTOL
    )
    np.testing.assert_allclose(_losses(job)[0], spmd_losses[0], rtol=LOSS_RTOL)


def test_pipeline_without_a_mesh_is_a_usage_error():
    with pytest.raises(UsageError, match="NUM_STAGES=2 needs an ICI_MESH_SHAPE"):
        instantiate(derive(Pmap, NUM_STAGES=2, NUM_LAYERS=2)())
