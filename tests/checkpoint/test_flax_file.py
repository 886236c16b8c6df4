"""pax.checkpoint.flax_file: the pmap runs' single-file checkpoints, their retention and damage."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pax.checkpoint.flax_file import FlaxFileCheckpointer
from pax.errors import UsageError


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
