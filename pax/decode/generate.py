"""Generation: prefill the prompts in one pass, then one token per step with the KV cache.

A batch of prompts is left-padded to a common length (the shape bucket, pax.decode.prompts):
every row's last prompt token sits in the same slot, so one forward pass over the bucket fills
the cache and yields every row's first logits, and each step then feeds one token per row.
Padding is segment 0 and each prompt segment 1 (or its packed documents' ids), so real tokens
never attend to padding; positions count from each prompt's first token, so a row's positions
do not depend on how much padding it got.

The whole loop (prefill, then a while loop of decode steps that ends early once every row has
stopped) is one jitted function, compiled once per shape bucket: (batch, prompt length).
Parameters stay where training put them (the logical-axis rules over the run's mesh); prompts
and the cache are split over (`replica`, `data`) by batch, the cache's heads over `mdl`.
"""

import dataclasses
import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from pax.decode.sampling import Sampling, pick
from pax.experiments.config import ModelConfig
from pax.models import kv_cache
from pax.models.transformer import TransformerLm
from pax.parallel import sharding

# Why a row stopped.
STOPS = ("max_new_tokens", "eos", "seq_len")
_MAX_NEW, _EOS, _SEQ_LEN = range(3)
NO_TOKEN = -1  # in `tokens` after a row stopped


@dataclasses.dataclass(frozen=True)
class Prompts:
    """A batch of prompts as the model takes them (host arrays, batch first)."""

    tokens: np.ndarray  # (batch, length) int32, left-padded
    positions: np.ndarray  # (batch, length) int32: 0.. from each prompt's first token
    segment_ids: np.ndarray  # (batch, length) int32: 0 padding, >= 1 prompt
    rows: np.ndarray  # (batch,) int32: which prompt each row is (its own random stream)


@dataclasses.dataclass(frozen=True)
class Generated:
    tokens: np.ndarray  # (batch, max_new) int32; NO_TOKEN after a row stopped; EOS included
    counts: np.ndarray  # (batch,) tokens generated, EOS not counted
    stops: list  # per row, one of STOPS
    logits: Optional[np.ndarray] = None  # (batch, max_new, vocab) f32 each token was drawn from


def decode_model(cfg: ModelConfig, mesh=None) -> TransformerLm:
    """The model for decoding: the same parameters, without training's memory savers.

    Rematerialization saves memory only for a backward pass, which decoding never runs, and
    query chunks are skipped with a cache anyway. A pipeline's stages run as one stack of
    layers (`unstage` lays their parameters out for it): a decode step has no microbatches to
    keep the stages busy with.
    """
    return TransformerLm(
        dataclasses.replace(cfg, remat_policy="none", attention_query_chunk=0), mesh=mesh
    )


def unstage(variables: dict, num_stages: int, num_layers: int) -> dict:
    """A pipelined model's variables laid out as the same model's without stages.

    pax.parallel.pipeline keeps each stage's layers under pipeline/ticks/stages, stacked on a
    leading stage axis: `layers` (stage, layer in stage, ...) when layers are repeated, else
    `layer_<i>` (stage, ...) for each layer i of a stage. Layer i of stage s is layer
    s * (num_layers // num_stages) + i of the whole stack.
    """
    per_stage = num_layers // num_stages
    out = {}
    for collection, tree in variables.items():
        tree = dict(tree)
        stages = tree.pop("pipeline", {}).get("ticks", {}).get("stages", {})
        for name, sub in stages.items():
            if name == "layers":
                tree["layers"] = jax.tree.map(
                    lambda a: a.reshape((num_stages * per_stage,) + a.shape[2:]), sub
                )
            else:
                i = int(name.split("_")[1])
                for stage in range(num_stages):
                    tree[f"layer_{stage * per_stage + i}"] = jax.tree.map(lambda a: a[stage], sub)
        out[collection] = tree
    return out


def unscan(variables: dict, num_layers: int) -> dict:
    """Variables of a model whose layers nn.scan stacks (`layers`, each leaf (layer, ...)) laid
    out as the same model's with unrolled layers (`layer_<i>`); other variables as they are."""
    out = {}
    for collection, tree in variables.items():
        tree = dict(tree)
        stacked = tree.pop("layers", None)
        if stacked is not None:
            for i in range(num_layers):
                tree[f"layer_{i}"] = jax.tree.map(lambda a, i=i: a[i], stacked)
        out[collection] = tree
    return out


def decode_step(model: TransformerLm, variables, cache, tokens, positions, segment_ids):
    """One pass of `model` over `tokens` with its KV cache: (the updated cache, each row's
    logits at its last position)."""
    logits, mutated = model.apply(
        {**variables, kv_cache.COLLECTION: cache},
        tokens,
        positions,
        segment_ids,
        mutable=[kv_cache.COLLECTION],
    )
    return mutated[kv_cache.COLLECTION], logits[:, -1]


def make_generate(
    model: TransformerLm,
    max_new: int,
    sampling: Sampling,
    eos_id: int = -1,
    with_logits: bool = False,
):
    """generate(variables, tokens, positions, segment_ids, rows, seed) -> dict of arrays.

    Pure and traceable: jit it (Generator does). eos_id < 0: never stop at a token.

    Repeated layers are decoded unrolled, each layer's parameters and cache their own arrays:
    under nn.scan a step would slice every layer's cache out of a stacked one and stack the
    updated slices back, copying the whole cache at every step. Variables come laid out
    unrolled (`unscan`, as pax.decode.decoder lays out a checkpoint once) or as `model` has them;
    then every call slices each layer's weights out of the stack, a copy of them all for as
    long as the call runs (benchmarks/decode/memory.py prices it).
    """
    max_seq_len = model.cfg.seq_len
    stacked = model.cfg.use_repeated_layer and model.num_stages == 1
    if stacked:
        model = model.clone(cfg=dataclasses.replace(model.cfg, use_repeated_layer=False))

    forward = functools.partial(decode_step, model)

    def generate(variables, tokens, positions, segment_ids, rows, seed):
        if stacked:
            variables = unscan(variables, model.cfg.num_layers)
        batch, length = tokens.shape
        row_keys = jax.vmap(jax.random.fold_in, (None, 0))(jax.random.key(seed), rows)
        cache = kv_cache.init(model, variables, batch, length + max_new)
        cache, logits = forward(variables, cache, tokens, positions, segment_ids)
        emit = functools.partial(
            _emit,
            row_keys=row_keys,
            sampling=sampling,
            eos_id=eos_id,
            max_seq_len=max_seq_len,
            with_logits=with_logits,
        )

        def step(s):
            """Feeds the last token drawn, then draws the next."""
            fed = jnp.maximum(s["tokens"][:, s["i"] - 1], 0)  # stopped rows feed a dummy 0
            position = jnp.minimum(s["position"], max_seq_len - 1)  # stopped rows: any valid
            cache, logits = forward(
                variables, s["cache"], fed[:, None], position[:, None], s["segment"][:, None]
            )
            s = {**s, "cache": cache, "logits": logits, "position": s["position"] + 1}
            return emit(s)

        state = emit(_first_state(cache, logits, positions, segment_ids, max_new, with_logits))
        state = jax.lax.while_loop(lambda s: (s["i"] < max_new) & ~jnp.all(s["done"]), step, state)
        out = {k: state[k] for k in ("tokens", "counts", "stops")}
        if with_logits:
            out["logits"] = state["all_logits"]
        return out

    return generate


def _first_state(cache, logits, positions, segment_ids, max_new: int, with_logits: bool) -> dict:
    """The decoding loop's state after the prompts' pass, before the first token is drawn."""
    batch = positions.shape[0]
    state = {
        "i": jnp.zeros((), jnp.int32),
        "cache": cache,
        "logits": logits,
        "position": positions[:, -1] + 1,  # where the next token goes
        "segment": segment_ids[:, -1],  # generated tokens continue the last segment
        "done": jnp.zeros((batch,), bool),
        "tokens": jnp.full((batch, max_new), NO_TOKEN, jnp.int32),
        "counts": jnp.zeros((batch,), jnp.int32),
        "stops": jnp.full((batch,), _MAX_NEW, jnp.int32),
    }
    if with_logits:
        state["all_logits"] = jnp.zeros((batch, max_new, logits.shape[-1]), jnp.float32)
    return state


def _emit(s, *, row_keys, sampling: Sampling, eos_id: int, max_seq_len: int, with_logits: bool):
    """Draws token i of every row from s['logits'] and books it."""
    i, live = s["i"], ~s["done"]
    token = pick(s["logits"], jax.vmap(jax.random.fold_in, (0, None))(row_keys, i), sampling)
    eos = live & (token == eos_id)
    # The token just drawn sits at position SEQ_LEN: the model has no position to feed
    # it at, so the row ends (training never predicts past that either).
    full = live & ~eos & (s["position"] >= max_seq_len)
    s = dict(s)
    s["tokens"] = s["tokens"].at[:, i].set(jnp.where(live, token, NO_TOKEN))
    s["counts"] = s["counts"] + (live & ~eos)
    s["stops"] = jnp.where(eos, _EOS, jnp.where(full, _SEQ_LEN, s["stops"]))
    s["done"] = s["done"] | eos | full
    if with_logits:
        s["all_logits"] = s["all_logits"].at[:, i].set(s["logits"])
    s["i"] = i + 1
    return s


class Generator:
    """Decodes batches of prompts with one model, sampling and length; compiles once per
    shape bucket (jax.jit's own cache, keyed by the prompts' shapes)."""

    def __init__(
        self,
        cfg: ModelConfig,
        mesh: jax.sharding.Mesh,
        variable_shardings,
        max_new: int,
        sampling: Sampling,
        eos_id: int = -1,
        with_logits: bool = False,
    ):
        self.mesh, self.max_new = mesh, max_new
        self.model = decode_model(cfg, mesh)
        batch = sharding.batch_sharding(mesh)
        self._row_sharding = NamedSharding(mesh, PartitionSpec(("replica", "data")))
        self._batch_sharding = batch
        replicated = sharding.replicated(mesh)
        self._generate = jax.jit(
            make_generate(self.model, max_new, sampling, eos_id, with_logits),
            in_shardings=(variable_shardings, batch, batch, batch, self._row_sharding, replicated),
            out_shardings=replicated,
        )

    @property
    def batch_multiple(self) -> int:
        """Batches must split evenly over the mesh's batch axes."""
        return self.mesh.shape["replica"] * self.mesh.shape["data"]

    def _put(self, array: np.ndarray, spec) -> jax.Array:
        # Every process holds the whole host array; each places the shards it owns.
        return jax.make_array_from_callback(array.shape, spec, lambda index: array[index])

    def __call__(self, variables, prompts: Prompts, seed: int) -> Generated:
        args = [
            self._put(getattr(prompts, k), self._batch_sharding)
            for k in ("tokens", "positions", "segment_ids")
        ]
        rows = self._put(prompts.rows.astype(np.int32), self._row_sharding)
        out = jax.device_get(self._generate(variables, *args, rows, np.uint32(seed)))
        return Generated(
            tokens=np.asarray(out["tokens"]),
            counts=np.asarray(out["counts"]),
            stops=[STOPS[s] for s in np.asarray(out["stops"])],
            logits=np.asarray(out["logits"]) if "logits" in out else None,
        )
