import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from pax.errors import UsageError
from pax.experiments import registry
from pax.experiments.config import MeshConfig
from pax.models.fp8 import OWG
from pax.models.transformer import TransformerLm, lm_loss
from pax.optim import optimizers
from pax.parallel import sharding
from pax.parallel.mesh import build_mesh
from pax.train import state as state_lib
from tests.helpers import Tiny, derive


def _mesh(shape):
    return build_mesh(MeshConfig(ici_mesh_shape=shape, dcn_mesh_shape=None))


def test_mesh_axes_and_shape():
    mesh = _mesh((1, 2, 4))
    assert dict(mesh.shape) == {"replica": 1, "data": 2, "mdl": 4}


def test_no_mesh_shape_is_data_parallel_over_all_devices():
    mesh = build_mesh(MeshConfig(ici_mesh_shape=None, dcn_mesh_shape=None))
    assert dict(mesh.shape) == {"replica": 1, "data": 8, "mdl": 1}


def test_dcn_shape_multiplies_the_ici_shape():
    mesh = build_mesh(MeshConfig(ici_mesh_shape=(1, 2, 2), dcn_mesh_shape=(2, 1, 1)))
    assert dict(mesh.shape) == {"replica": 2, "data": 2, "mdl": 2}


def test_mesh_that_does_not_fit_is_a_usage_error():
    with pytest.raises(
        UsageError,
        match=r"needs 16 devices but 8 cpu device\(s\).*"
        r"xla_force_host_platform_device_count=16.*ICI_MESH_SHAPE=\[1,-1,1\]",
    ):
        _mesh((1, 16, 1))
    with pytest.raises(UsageError, match="must each have 3 entries"):
        _mesh((8, 1))


def test_logical_rules_split_weights_over_data_and_mdl():
    mesh = _mesh((1, 2, 4))
    assert sharding.logical_sharding(("embed", "mlp"), (64, 128), mesh).spec == P("data", "mdl")
    assert sharding.logical_sharding(("mlp", "embed"), (128, 64), mesh).spec == P("mdl", "data")
    assert sharding.logical_sharding(("vocab", "embed"), (256, 64), mesh).spec == P("mdl", "data")
    # The batch goes over (replica, data); a size-1 replica axis drops out of the spec.
    assert sharding.logical_sharding(("batch", "length"), (16, 32), mesh).spec == P("data", None)
    assert sharding.logical_sharding(("batch",), (16,), _mesh((2, 2, 2))).spec == P(
        ("replica", "data")
    )


def test_an_activations_indivisible_dimension_stays_unsplit():
    """A constraint inside a step (logits [batch, length, vocab]) may leave a dimension unsplit;
    a stored parameter may not (next test)."""
    mesh = _mesh((1, 2, 4))
    assert sharding.logical_sharding(("vocab", "embed"), (50257, 64), mesh).spec == P(None, "data")


def test_a_parameter_the_mesh_does_not_divide_is_a_usage_error_naming_the_fix():
    mesh = _mesh((1, 2, 4))
    with pytest.raises(
        UsageError,
        match=r"parameter params/embedding: dimension 0 \(vocab, 50257\) does not split over "
        r"mesh axis `mdl` \(4\), and it would be replicated on every device; pad the "
        r"vocabulary: --set VOCAB_PAD_MULTIPLE=4 .*or change ICI_MESH_SHAPE",
    ):
        sharding.param_sharding("params/embedding", ("vocab", "embed"), (50257, 64), mesh)
    with pytest.raises(UsageError, match=r"dimension 2 \(heads, 2\).*NUM_KV_HEADS"):
        sharding.param_sharding("params/qkv", ("embed", None, "heads", "kv"), (64, 4, 2, 8), mesh)
    # jax itself refuses to place an array on axes that do not divide it (no uneven shards).
    with pytest.raises(ValueError, match="divide"):
        jax.device_put(np.zeros((50257, 8), np.float32), NamedSharding(mesh, P("mdl", None)))


def test_gpt3_vocabulary_padded_for_a_4_way_mdl_mesh():
    """VOCAB_SIZE 50257 with VOCAB_PAD_MULTIPLE=4 on (data 2, mdl 4): the tables have 50260
    rows, split 4 ways; the run's first lines show it; the padded ids get no probability, so
    the loss is the unpadded model's and the padding rows get no gradient."""
    mesh = _mesh((1, 2, 4))
    exp = derive(Tiny, ICI_MESH_SHAPE=(1, 2, 4), VOCAB_SIZE=50257, VOCAB_PAD_MULTIPLE=4)
    task = exp().task()
    model = TransformerLm(task.model, mesh=mesh)
    tx, _ = optimizers.build(task.optimizer, state_lib.repeat_prefix(model))
    abstract, shardings = state_lib.shardings(model, tx, mesh)
    assert abstract["params"]["embedding"].shape == (50260, 64)
    assert shardings["params"]["embedding"].spec == P("mdl", "data")
    lines = state_lib.sharding_lines(abstract, min_bytes=1 << 20)
    assert lines == [
        "params/embedding [50260, 64] float32 on P('mdl', 'data'): [12565, 32] per device "
        "(1.5 of 12.3 MiB)"
    ]
    # Three padding rows of the table and three of the softmax bias are not counted.
    assert state_lib.num_params(abstract, task.model) == state_lib.num_params(abstract) - 3 * 65
    state = state_lib.initialize(model, tx, shardings, seed=0)
    table = state["params"]["embedding"]
    assert table.addressable_shards[0].data.shape == (12565, 32)

    # The same weights without the padding rows, in a model without padding.
    params = jax.device_get(state["params"])
    plain_model = TransformerLm(dataclasses.replace(task.model, vocab_pad_multiple=1))
    padded = ("embedding", "softmax_bias")
    plain = {**params, **{k: params[k][:50257] for k in padded}}
    tokens = jax.random.randint(jax.random.key(1), (2, 17), 0, 50257)
    padded_model = TransformerLm(task.model)

    def loss(m, p):
        logits = m.apply({"params": p}, tokens[:, :-1])
        return lm_loss(logits, tokens[:, 1:], jnp.ones((2, 16)))[0]

    @jax.jit  # both models in one program: op by op they compiled over a hundred
    def both(params, plain):
        padded_loss, grads = jax.value_and_grad(lambda p: loss(padded_model, p))(params)
        return padded_loss, grads, loss(plain_model, plain)

    padded_loss, grads, plain_loss = both(params, plain)
    np.testing.assert_allclose(padded_loss, plain_loss, rtol=1e-6)
    for k in padded:
        assert not np.asarray(grads[k])[50257:].any(), k


def test_every_registered_experiments_parameters_split_on_its_own_mesh():
    """No registered experiment relies on a silently replicated weight: every parameter's
    dimensions split over the mesh axes its names map to (ICI x DCN shape; -1 as 1)."""
    for name in registry.names():
        task = registry.get(name)().task()
        m = task.mesh
        if m.ici_mesh_shape is None:
            continue  # pmap: a whole replica on every device by design
        dcn = m.dcn_mesh_shape or (1,) * len(m.ici_mesh_shape)
        sizes = [max(i, 1) * d for i, d in zip(m.ici_mesh_shape, dcn)]
        mesh_shape = dict(zip(m.mesh_axis_names, sizes))
        model = TransformerLm(task.model, num_stages=m.num_stages, num_microbatches=m.num_stages)
        inputs = jnp.zeros((m.num_stages, 8), "int32")
        boxed = jax.eval_shape(lambda: model.init(jax.random.key(0), inputs))["params"]  # noqa: B023
        jax.tree_util.tree_map_with_path(
            lambda path, spec, p: sharding.param_spec(
                f"{name} {jax.tree_util.keystr(path)}", tuple(spec), p.shape, mesh_shape
            ),
            nn.get_partition_spec(boxed),
            nn.unbox(boxed),
            is_leaf=lambda x: isinstance(x, P),
        )


def test_train_state_placement_on_a_2d_mesh():
    mesh = _mesh((1, 2, 4))
    task = derive(Tiny, ICI_MESH_SHAPE=(1, 2, 4))().task()
    model = TransformerLm(task.model, mesh=mesh)
    tx, _ = optimizers.build(task.optimizer)
    abstract, shardings = state_lib.shardings(model, tx, mesh)
    qkv = shardings["params"]["layers"]["attention"]["qkv"]
    assert qkv.spec == P(None, "data", None, "mdl", None)
    wi = shardings["params"]["layers"]["ffn"]["wi"]
    assert wi.spec == P(None, "data", "mdl")
    # Adam's moments are placed like their parameters; the step count is replicated.
    adam = shardings["opt_state"].inner_state[1]  # apply_if_finite(chain(clip, adam, ...))
    assert adam.mu["layers"]["ffn"]["wi"].spec == P(None, "data", "mdl")
    assert shardings["step"].spec == P()
    state = state_lib.initialize(model, tx, shardings, seed=0)
    assert state["params"]["layers"]["ffn"]["wi"].sharding.spec == P(None, "data", "mdl")
    shard_shape = state["params"]["layers"]["ffn"]["wi"].addressable_shards[0].data.shape
    assert shard_shape == (2, 32, 32)


def test_a_decoders_variables_are_placed_as_the_train_state_places_them():
    """variable_shardings (what a decoder reads: parameters and FP8 state) without an
    optimizer's trace is the train state's placement of the same collections."""
    mesh = _mesh((1, 2, 4))
    task = derive(Tiny, ICI_MESH_SHAPE=(1, 2, 4), USE_FP8=True)().task()
    model = TransformerLm(task.model, mesh=mesh)
    tx, _ = optimizers.build(task.optimizer)
    placed = state_lib.model_variables(state_lib.shardings(model, tx, mesh)[1])
    assert set(placed) == {"params", OWG}
    assert state_lib.variable_shardings(model, mesh) == placed


def test_every_optimizer_statistic_is_sharded_along_its_parameters_axes():
    """praxis ShardedAdafactor.init_partition_spec shards the factored moments along their
    parameter's split_dims_mapping minus the reduced axis (v_row: the mapping without its last
    entry, v_col: without the one before), the unfactored ones and the momentum like the
    parameter; here on a (data 2, mdl 4) mesh, every statistic of a parameter too."""
    mesh = _mesh((1, 2, 4))
    task = derive(Tiny, ICI_MESH_SHAPE=(1, 2, 4), OPTIMIZER="adafactor", WEIGHT_DECAY=1e-3)()
    task = task.task()
    model = TransformerLm(task.model, mesh=mesh)
    tx, _ = optimizers.build(task.optimizer, state_lib.repeat_prefix(model))
    abstract, shardings = state_lib.shardings(model, tx, mesh)
    # apply_if_finite(chain(global-norm clip, chain(factored rms, clip, lr, ema, decay, -1)))
    factored = shardings["opt_state"].inner_state[1][0]
    momentum = shardings["opt_state"].inner_state[1][3]
    wi = ("layers", "ffn", "wi")  # [layers, D, F] on (None, data, mdl)

    def at(tree, path):
        for key in path:
            tree = tree[key]
        return tree

    assert at(factored.v_row, wi).spec == P(None, "data", None)  # [layers, D, 1]
    assert at(factored.v_col, wi).spec == P(None, None, "mdl")  # [layers, 1, F]
    assert factored.v_row["embedding"].spec == P("mdl", None)  # [vocab, 1] of [vocab, D]
    assert factored.v_col["embedding"].spec == P(None, "data")  # [1, D]
    assert at(momentum.ema, wi).spec == P(None, "data", "mdl")
    # A stacked norm scale is a vector per layer: unfactored, its moment shaped and placed
    # like it.
    scale = ("layers", "pre_ffn_norm", "scale")
    assert at(factored.v, scale).spec == at(shardings["params"], scale).spec == P(None, "data")

    # Every statistic of every parameter: each axis it shares with the parameter split as the
    # parameter's, each reduced (size-1) axis unsplit.
    def check(slot, param):
        assert slot.ndim == param.ndim
        pspec = tuple(param.sharding.spec) + (None,) * (param.ndim - len(param.sharding.spec))
        sspec = tuple(slot.sharding.spec) + (None,) * (slot.ndim - len(slot.sharding.spec))
        for s, p, a, b in zip(slot.shape, param.shape, sspec, pspec):
            assert a == (b if s == p else None), (slot.shape, param.shape, sspec, pspec)

    optax.tree_map_params(
        tx,
        check,
        abstract["opt_state"],
        abstract["params"],
        transform_non_params=lambda _: None,
    )
    # Placed so on initialization: each device holds its share of the row statistics.
    state = state_lib.initialize(model, tx, shardings, seed=0)
    v_row = at(state["opt_state"].inner_state[1][0].v_row, wi)
    assert v_row.shape == (2, 64, 1)
    assert v_row.addressable_shards[0].data.shape == (2, 32, 1)
