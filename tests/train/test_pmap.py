"""The pmap path (no ICI_MESH_SHAPE): same losses as SPMD; Flax single-file or tensorstore
checkpoints, both resuming exactly."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pax.checkpoint.flax_file import FlaxFileCheckpointer
from pax.errors import UsageError
from pax.train import loop
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
    run = loop.prepare(derive(Pmap, NUM_TRAIN_STEPS=3)())
    assert run.strategy == "pmap" and run.model.mesh is None
    loop.train(run, job, "pmap")
    # Pax's pmap layout without tensorstore: one Flax (msgpack) file per step.
    assert os.path.isfile(os.path.join(job, "checkpoints", "checkpoint_00000003"))
    loop.train(loop.prepare(Pmap()), job, "pmap")  # resumes at step 3
    train, evals = _losses(job)
    np.testing.assert_allclose(train, spmd_losses[0], rtol=LOSS_RTOL)
    np.testing.assert_allclose(evals, spmd_losses[1], rtol=LOSS_RTOL)


def test_pmap_with_tensorstore_writes_orbax_checkpoints_that_restore(tmp_path, spmd_losses):
    job = str(tmp_path / "job")
    run = loop.prepare(derive(Pmap, PMAP_USE_TENSORSTORE=True)())
    loop.train(run, job, "pmap")
    assert os.path.isdir(os.path.join(job, "checkpoints", "checkpoint_00000006", "state"))
    restored = loop.evaluate(run, job, "pmap")  # the step-6 state, read back through orbax
    assert restored["eval_test_embedded"]["loss"] == pytest.approx(
        spmd_losses[1][-1], rel=LOSS_RTOL
    )
    np.testing.assert_allclose(_losses(job)[0], spmd_losses[0], rtol=LOSS_RTOL)


def _state():
    return {"step": jnp.array(7, jnp.int32), "params": {"w": jnp.arange(6.0).reshape(2, 3)}}


def _abstract(state):
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=device), state)


def test_flax_file_checkpoints_keep_the_newest_and_set_damaged_ones_aside(tmp_path):
    ckpt = FlaxFileCheckpointer(str(tmp_path), max_to_keep=2)
    state = _state()
    for step in (1, 2, 3):
        ckpt.save(step, {**state, "step": jnp.array(step)})
    assert ckpt.all_steps() == [2, 3]
    with open(tmp_path / "checkpoints" / "checkpoint_00000003", "r+b") as f:
        f.truncate(20)
    step, restored = ckpt.restore_latest(_abstract(state))
    assert step == 2 and int(restored["step"]) == 2
    np.testing.assert_array_equal(restored["params"]["w"], state["params"]["w"])
    assert os.path.isfile(tmp_path / "checkpoints_damaged" / "checkpoint_00000003")
    assert not os.path.exists(tmp_path / "checkpoints" / "checkpoint_00000002.tmp")


def test_flax_file_checkpoint_of_another_model_is_a_usage_error_and_is_kept(tmp_path):
    ckpt = FlaxFileCheckpointer(str(tmp_path), max_to_keep=2)
    ckpt.save(1, _state())
    other = {**_state(), "params": {"w": jnp.zeros((4, 3))}}
    with pytest.raises(
        UsageError,
        match=r"checkpoint_00000001 was written by another model: params/w is \[2, 3\] float32 "
        r"there, \[4, 3\] float32 in this run; nothing was moved. Use a new --job_log_dir",
    ):
        ckpt.restore_latest(_abstract(other))
    assert ckpt.all_steps() == [1]


def test_pipeline_without_a_mesh_is_a_usage_error():
    with pytest.raises(UsageError, match="NUM_STAGES=2 needs an ICI_MESH_SHAPE"):
        loop.prepare(derive(Pmap, NUM_STAGES=2, NUM_LAYERS=2)())
