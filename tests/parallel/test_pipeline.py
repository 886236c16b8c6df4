"""GPipe stages: same loss and gradients as the unpipelined model, on 1 and 8 devices."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from pax.errors import UsageError
from pax.experiments.config import MeshConfig
from pax.models.transformer import TransformerLm, lm_loss
from pax.parallel import pipeline, sharding
from pax.parallel.mesh import build_mesh
from pax.train import loop
from pax.train.instantiate import instantiate
from tests.helpers import Tiny, derive, read_metrics

STAGES, MICROBATCHES = 2, 4
PIPE_AXES = ("stage", "replica", "data", "mdl")
# Float32 sums reassociate between the two schedules; nothing else differs.
LOSS_RTOL, GRAD_RTOL = 1e-6, 1e-4

Piped = derive(
    Tiny,
    NUM_LAYERS=4,
    MESH_AXIS_NAMES=PIPE_AXES,
    ICI_MESH_SHAPE=(2, 1, 2, 2),
    DCN_MESH_SHAPE=None,
    NUM_STAGES=STAGES,
    NUM_MICROBATCHES=MICROBATCHES,
    PERCORE_BATCH_SIZE=2,
)


def _staged(flat_params, num_stages):
    """The unpipelined parameters rearranged for the pipeline: layers (L, ...) -> (S, L/S, ...)."""
    params = dict(flat_params)
    layers = params.pop("layers")
    params["pipeline"] = {
        "ticks": {
            "stages": {
                "layers": jax.tree.map(
                    lambda a: a.reshape((num_stages, a.shape[0] // num_stages) + a.shape[1:]),
                    layers,
                )
            }
        }
    }
    return params


def _relative_error(a, b):
    # On the host: eagerly, jnp would compile a program per leaf shape and sharding.
    a, b = jax.device_get((a, b))
    return max(
        jax.tree.leaves(jax.tree.map(lambda x, y: np.abs(x - y).max() / np.abs(x).max(), a, b))
    )


# Packed rows, as C4 batches are: 3 documents each; segment ids must travel with their microbatch.
SEGMENT_IDS = jnp.repeat(jnp.arange(1, 4), jnp.array([10, 12, 10]), total_repeat_length=32)


def _loss(model, tokens, targets):
    """The model's loss on this packed batch, as a function of its parameters."""
    segment_ids = jnp.broadcast_to(SEGMENT_IDS, tokens.shape)

    def loss(p):
        logits = model.apply({"params": p}, tokens, segment_ids=segment_ids)
        return lm_loss(logits, targets, jnp.ones(tokens.shape))[0]

    return loss


def _loss_and_grads(model, params, tokens, targets):
    """(loss, grads, optimized HLO text) of the model on this packed batch."""
    compiled = jax.jit(jax.value_and_grad(_loss(model, tokens, targets))).lower(params).compile()
    return (*compiled(params), compiled.as_text())


@pytest.fixture(scope="module")
def flat():
    cfg = Piped().task().model
    model = TransformerLm(cfg)

    @jax.jit  # the batch, the parameters and their loss and gradients as one program
    def reference():
        tokens = jax.random.randint(jax.random.key(1), (16, cfg.seq_len), 0, cfg.vocab_size)
        targets = jax.random.randint(jax.random.key(2), tokens.shape, 0, cfg.vocab_size)
        params = nn.unbox(model.init(jax.random.key(0), tokens)["params"])
        loss, grads = jax.value_and_grad(_loss(model, tokens, targets))(params)
        return tokens, targets, params, (loss, grads)

    # On the host, where _staged's reshapes compile nothing.
    tokens, targets, params, loss_and_grads = jax.device_get(reference())
    return cfg, tokens, targets, params, loss_and_grads


def test_bubble_fraction():
    assert pipeline.bubble_fraction(1, 8) == 0
    assert pipeline.bubble_fraction(2, 4) == pytest.approx(1 / 5)
    # Pax's GPT-3 pipeline: 4 stages, 16 microbatches.
    assert pipeline.bubble_fraction(4, 16) == pytest.approx(3 / 19)


def test_microbatches_round_trip_and_take_strided_rows():
    a = jnp.arange(8 * 3).reshape(8, 3)
    m = pipeline.to_microbatches(a, 4)
    assert m.shape == (4, 2, 3)
    np.testing.assert_array_equal(m[1], a[1::4])
    np.testing.assert_array_equal(pipeline.from_microbatches(m), a)


def test_stage_parameters_carry_a_stage_axis(flat):
    cfg, tokens, *_ = flat
    boxed = jax.eval_shape(
        TransformerLm(cfg, num_stages=STAGES, num_microbatches=MICROBATCHES).init,
        jax.random.key(0),
        tokens,
    )["params"]
    wi = boxed["pipeline"]["ticks"]["stages"]["layers"]["ffn"]["wi"]
    assert wi.names == ("stage", "layers", "embed", "mlp")
    assert wi.value.shape == (STAGES, cfg.num_layers // STAGES, cfg.model_dims, cfg.hidden_dims)


def test_pipelined_loss_and_gradients_match_unpipelined_on_one_device(flat):
    cfg, tokens, targets, params, (loss, grads) = flat
    piped = TransformerLm(cfg, num_stages=STAGES, num_microbatches=MICROBATCHES)
    p_loss, p_grads, _ = _loss_and_grads(piped, _staged(params, STAGES), tokens, targets)
    assert float(p_loss) == pytest.approx(float(loss), rel=LOSS_RTOL)
    assert _relative_error(_staged(grads, STAGES), p_grads) < GRAD_RTOL


def test_pipelined_on_eight_devices_matches_and_shifts_with_collective_permutes(flat):
    cfg, tokens, targets, params, (loss, grads) = flat
    mesh = build_mesh(
        MeshConfig(
            mesh_axis_names=PIPE_AXES,
            ici_mesh_shape=(2, 1, 2, 2),
            num_stages=STAGES,
            num_microbatches=MICROBATCHES,
        )
    )
    piped = TransformerLm(cfg, mesh=mesh, num_stages=STAGES, num_microbatches=MICROBATCHES)
    staged = _staged(params, STAGES)
    names = nn.get_partition_spec(jax.eval_shape(piped.init, jax.random.key(0), tokens)["params"])
    shardings = jax.tree.map(
        lambda spec, p: sharding.logical_sharding(tuple(spec), p.shape, mesh),
        names,
        staged,
        is_leaf=lambda x: isinstance(x, P),
    )
    assert shardings["pipeline"]["ticks"]["stages"]["layers"]["ffn"]["wi"].spec == P(
        "stage", None, "data", "mdl"
    )
    staged = jax.device_put(staged, shardings)
    tokens = jax.device_put(tokens, sharding.batch_sharding(mesh))
    p_loss, p_grads, hlo = _loss_and_grads(piped, staged, tokens, targets)
    assert float(p_loss) == pytest.approx(float(loss), rel=LOSS_RTOL)
    assert _relative_error(_staged(grads, STAGES), p_grads) < GRAD_RTOL
    assert "collective-permute" in hlo


def test_pipelined_experiment_trains(tmp_path):
    # The loop around a pipeline on its two stages alone, a layer each: the 8-device mesh's step
    # (two layers a stage) is checked above, and compiles at a third more. No checkpoints: the
    # pipeline's are written and read in tests/decode/test_decoder.py.
    job = str(tmp_path / "job")
    staged = derive(
        Piped, NUM_LAYERS=2, EVAL_EVERY_N_STEPS=6, ICI_MESH_SHAPE=(2, 1, 1, 1), PERCORE_BATCH_SIZE=4
    )
    loop.train(
        instantiate(staged(), devices=jax.devices()[:2]), job, "piped", checkpoint_saving=False
    )
    losses = [r["loss"] for r in read_metrics(job)]
    assert len(losses) == 6 and all(np.isfinite(losses))
    assert losses[-1] < losses[0]


@pytest.mark.parametrize(
    "attrs, message",
    [
        (dict(NUM_STAGES=1), r"NUM_STAGES=1 but the mesh has 2 along `stage`"),
        (dict(NUM_LAYERS=3), r"NUM_LAYERS=3 does not split into NUM_STAGES=2"),
        (dict(NUM_MICROBATCHES=3), r"do not split into 3 microbatches"),
        (dict(MICROBATCH_SIZE=2), r"exactly one of NUM_MICROBATCHES and MICROBATCH_SIZE"),
        (
            dict(MESH_AXIS_NAMES=("replica", "data", "mdl"), ICI_MESH_SHAPE=(1, 4, 2)),
            r"NUM_STAGES=2 needs a `stage` axis in MESH_AXIS_NAMES",
        ),
    ],
)
def test_bad_pipeline_settings_are_usage_errors(attrs, message):
    with pytest.raises(UsageError, match=message):
        instantiate(derive(Piped, **attrs)())
