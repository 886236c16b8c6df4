"""The train state, its shardings and its initialization directly into those shardings.

The state is {'step', 'params', 'opt_state'} and, for an FP8 model, the FP8 scales and amax
histories under pax.models.fp8.OWG (f32, replicated, not parameters).
"""

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from pax.models import fp8, transformer
from pax.parallel import sharding


def _example_inputs(model):
    # A pipeline splits its batch into microbatches; one row each is the smallest batch it takes.
    return jnp.zeros((model.num_microbatches, model.cfg.seq_len), jnp.int32)


@functools.lru_cache(maxsize=16)  # one function, so one trace, per model and optimizer
def _init_fn(model, tx):
    def init(rng):
        variables = nn.unbox(model.init(rng, _example_inputs(model)))
        params = variables["params"]
        state = {"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": tx.init(params)}
        if fp8.OWG in variables:
            state[fp8.OWG] = variables[fp8.OWG]
        return state

    return init


# Logical axes that stack whole layers: a parameter's leading dimensions named so are its
# repeat prefix (praxis WeightHParams.repeat_prefix), each slice a parameter of its own.
STACKED_AXES = ("stage", "layers")


# A run asks for its model's abstract variables three to four times (shardings, repeat
# prefix, a decoder's placement), each a full trace of model.init; models are frozen dataclasses,
# equal when their configs are, so one trace serves them all.
@functools.lru_cache(maxsize=8)
def _abstract_variables(model):
    """The model's variables, every collection, as abstract arrays in their logical-axis boxes."""
    return jax.eval_shape(lambda: model.init(jax.random.key(0), _example_inputs(model)))


def _param_names(model):
    return nn.get_partition_spec(_abstract_variables(model)["params"])


def _is_spec(x) -> bool:
    return isinstance(x, jax.sharding.PartitionSpec)


def _path(path) -> str:
    return "/".join(["params", *(str(getattr(k, "key", k)) for k in path)])


def param_shardings(model, mesh):
    """Each parameter's NamedSharding from its logical axis names; a UsageError naming the
    parameter, dimension and mesh axis where the mesh does not divide one
    (pax.parallel.sharding.param_spec)."""
    return _param_shardings(_abstract_variables(model)["params"], mesh)


def _param_shardings(boxed, mesh):
    return jax.tree_util.tree_map_with_path(
        lambda path, spec, p: sharding.param_sharding(_path(path), tuple(spec), p.shape, mesh),
        nn.get_partition_spec(boxed),
        nn.unbox(boxed),
        is_leaf=_is_spec,
    )


def variable_shardings(model, mesh) -> dict:
    """model_variables of `shardings`' state shardings (parameters by their logical axis
    names, FP8 state replicated) from one abstract init of the model, without tracing an
    optimizer's: where a decoder places the variables it reads."""
    boxed = _abstract_variables(model)
    out = {"params": _param_shardings(boxed["params"], mesh)}
    if fp8.OWG in boxed:
        out[fp8.OWG] = _fp8_state_shardings(nn.unbox(boxed[fp8.OWG]), mesh)
    return out


def _fp8_state_shardings(owg, mesh):
    """FP8 scales and amax histories, a few floats per layer: replicated."""
    return jax.tree.map(lambda _: sharding.replicated(mesh), owg)


def sharding_lines(abstract_state, min_bytes: int = 1 << 20) -> list:
    """One line per parameter of at least min_bytes: its shape, its PartitionSpec and what
    one device holds, so a run shows where its largest weights live."""
    lines = []
    for path, p in jax.tree_util.tree_leaves_with_path(abstract_state["params"]):
        nbytes = p.size * p.dtype.itemsize
        if nbytes < min_bytes:
            continue
        spec = p.sharding.spec
        per_device = p.sharding.shard_shape(p.shape)
        share = math.prod(per_device) * p.dtype.itemsize
        lines.append(
            f"{_path(path)} {list(p.shape)} {p.dtype} on {spec}: {list(per_device)} per device "
            f"({share / 2**20:.1f} of {nbytes / 2**20:.1f} MiB)"
        )
    return lines


def repeat_prefix(model):
    """Each parameter's number of leading stacked dimensions (`stage`, `layers`), as a tree
    shaped like the parameters: what pax.optim.optimizers.build vectorizes over."""

    def count(spec):
        k = 0
        while k < len(spec) and spec[k] in STACKED_AXES:
            k += 1
        return k

    return jax.tree.map(count, _param_names(model), is_leaf=_is_spec)


def slot_sharding(slot, param_sharding, param, mesh):
    """An optimizer statistic's sharding: along its parameter's matching axes. A statistic has
    its parameter's shape, or its rank with some axes reduced to size 1 (Adafactor's factored
    moments, praxis ShardedAdafactor), and those axes stay unsplit; anything else (a per-step
    scalar, a (1,) placeholder) is replicated."""
    if slot.shape == param.shape:
        return param_sharding
    if len(slot.shape) == len(param.shape) and all(
        a in (b, 1) for a, b in zip(slot.shape, param.shape)
    ):
        spec = tuple(param_sharding.spec) + (None,) * (len(param.shape) - len(param_sharding.spec))
        spec = [axis if a == b else None for axis, a, b in zip(spec, slot.shape, param.shape)]
        return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))
    return sharding.replicated(mesh)


@functools.lru_cache(maxsize=16)  # jax.eval_shape, unlike jit, retraces on every call
def _abstract_state(model, tx):
    return jax.eval_shape(_init_fn(model, tx), jax.random.key(0))


def shardings(model, tx, mesh, params=None):
    """(abstract state, state shardings): parameters placed by their logical axis names
    (`params`, param_shardings' result where the caller has it), optimizer statistics along
    their parameter's matching axes (slot_sharding), everything else (step, FP8 scales and amax
    histories: a few floats per layer) replicated."""
    abstract = _abstract_state(model, tx)
    params = param_shardings(model, mesh) if params is None else params
    replicated = sharding.replicated(mesh)
    opt_shardings = optax.tree_map_params(
        tx,
        lambda slot, s, p: slot_sharding(slot, s, p, mesh),
        abstract["opt_state"],
        params,
        abstract["params"],
        transform_non_params=lambda _: replicated,
    )
    state_shardings = {"step": replicated, "params": params, "opt_state": opt_shardings}
    if fp8.OWG in abstract:
        state_shardings[fp8.OWG] = _fp8_state_shardings(abstract[fp8.OWG], mesh)
    abstract = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, state_shardings
    )
    return abstract, state_shardings


def initialize(model, tx, state_shardings, seed: int):
    """A fresh state, created on device already sharded (no host copy of the full model)."""
    init = jax.jit(_init_fn(model, tx), out_shardings=state_shardings)
    return init(jax.random.key(seed))


def num_params(abstract_state, model_cfg=None) -> int:
    """Parameters only (not optimizer slots or FP8 state); given the model's config, not the
    vocabulary's padding rows either (VOCAB_PAD_MULTIPLE)."""
    stored = sum(p.size for p in jax.tree.leaves(abstract_state["params"]))
    return stored - (transformer.padding_params(model_cfg) if model_cfg else 0)


def model_variables(state) -> dict:
    """The collections model.apply reads: params and, for an FP8 model, its OWG state."""
    return {c: state[c] for c in fp8.LAYER_COLLECTIONS if c in state}
