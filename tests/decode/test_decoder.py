"""The decoder over other partitionings: pipelined and pmap runs decode as the plain model."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from pax.decode import decoder as decoder_lib
from pax.decode import generate as gen
from pax.decode.options import Options
from pax.models.transformer import TransformerLm
from pax.train import placement
from pax.train.instantiate import instantiate
from tests.helpers import Tiny, derive
from tests.parallel.test_pipeline import Piped

PROMPTS = ("The list", "Dictionaries are")


# Per-layer (unrepeated) stages: the slow tier; their decode path is the unrolled model's.
@pytest.mark.parametrize("repeated", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_unstaged_parameters_compute_what_the_pipeline_computes(repeated):
    piped_cfg = derive(Piped, USE_REPEATED_LAYER=repeated)().task()
    piped = TransformerLm(piped_cfg.model, num_stages=2, num_microbatches=4)
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 256, (4, 32), np.int32)
    # Random values of the parameters' shapes, made on the host: no init program is compiled,
    # and unstaging is numpy's reshapes, not one compiled program per leaf.
    shapes = nn.unbox(jax.eval_shape(piped.init, jax.random.key(0), tokens))["params"]
    variables = {
        "params": jax.tree.map(lambda a: rng.normal(0, 0.1, a.shape).astype(a.dtype), shapes)
    }
    flat = gen.unstage(variables, 2, piped_cfg.model.num_layers)
    assert "pipeline" not in flat["params"]
    expected = jax.jit(piped.apply)(variables, tokens)
    got = jax.jit(TransformerLm(piped_cfg.model).apply)(flat, tokens)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)


def _checkpointed(experiment_cls, job, devices):
    """A run of experiment_cls with a state of random values saved as step 6; its unplaced
    state. Made on the host and placed, not initialized: no program is compiled for it."""
    run = instantiate(experiment_cls(), devices=devices, with_data=False)
    place = placement.for_run(run)
    rng = np.random.default_rng(3)
    state = jax.device_put(
        jax.tree.map(lambda a: rng.normal(0, 0.1, a.shape).astype(a.dtype), place.abstract),
        place.shardings,
    )
    checkpointer = place.checkpointer(str(job), saving=True)
    checkpointer.save(6, state)
    checkpointer.close()
    return run, jax.device_get(state)


def _decode(run, job):
    options = Options(prompts=PROMPTS, max_new_tokens=6)
    return decoder_lib.decode_once(decoder_lib.Decoder(run, str(job), options, True))


def _reference(params, cfg):
    """The same prompts through the plain model on one device."""
    one = derive(Tiny, NUM_LAYERS=cfg.num_layers)
    run = instantiate(one(), devices=jax.devices()[:1], with_data=False)
    decoder = decoder_lib.Decoder(run, "/nonexistent", Options(prompts=PROMPTS, max_new_tokens=6))
    # device_put: jnp.asarray would compile a copy program per leaf shape.
    records = decoder.decode({"params": jax.device_put(params)}, 6)
    return [(r["completion"], r["completion_tokens"]) for r in records]


def test_a_pipelined_run_decodes_as_its_layers_in_one_stack(tmp_path):
    # Its two stages alone (a device each): test_generate decodes over `data` and `mdl`. A
    # layer a stage, so the reference decodes Tiny's two layers, the pmap test's program;
    # several layers a stage are unstaged in the test above.
    staged = derive(Piped, ICI_MESH_SHAPE=(2, 1, 1, 1), PERCORE_BATCH_SIZE=4, NUM_LAYERS=2)
    run, state = _checkpointed(staged, tmp_path / "job", jax.devices()[:2])
    records = _decode(run, tmp_path / "job")
    flat = gen.unstage({"params": state["params"]}, 2, run.task.model.num_layers)["params"]
    assert [(r["completion"], r["completion_tokens"]) for r in records] == _reference(
        flat, run.task.model
    )


def test_a_pmap_run_decodes_from_its_single_file_checkpoint(tmp_path):
    pmapped = derive(Tiny, ICI_MESH_SHAPE=None, PERCORE_BATCH_SIZE=4)
    run, state = _checkpointed(pmapped, tmp_path / "job", jax.devices()[:2])
    assert run.strategy == placement.PMAP
    assert (tmp_path / "job" / "checkpoints" / "checkpoint_00000006").is_file()  # Flax file
    records = _decode(run, tmp_path / "job")
    assert [(r["completion"], r["completion_tokens"]) for r in records] == _reference(
        state["params"], run.task.model
    )


@pytest.mark.parametrize("mesh", ["spmd", "pmap"])
def test_decoding_reads_the_parameters_only(tmp_path, mesh):
    """The decoder restores the parameters alone (orbax's partial restore; from a pmap run's
    single file only they reach the devices), never the optimizer's statistics: a checkpoint
    of the same model trained with another optimizer decodes."""
    extra = {"ICI_MESH_SHAPE": None, "PERCORE_BATCH_SIZE": 4} if mesh == "pmap" else {}
    devices = jax.devices()[:1]
    _, state = _checkpointed(derive(Tiny, OPTIMIZER="adafactor", **extra), tmp_path, devices)
    adam = instantiate(derive(Tiny, **extra)(), devices=devices, with_data=False)
    options = Options(prompts=PROMPTS, max_new_tokens=6)
    decoder = decoder_lib.Decoder(adam, str(tmp_path), options, True)
    variables = decoder.variables(decoder.checkpointer(), 6)
    assert set(variables) == {"params"}
    jax.tree.map(
        np.testing.assert_array_equal, jax.device_get(variables["params"]), state["params"]
    )
