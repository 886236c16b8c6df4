"""Cached decoding against re-running the full sequence, stops, seeds and sharding."""

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

from pax.decode import generate as gen
from pax.decode import prompts as prompts_lib
from pax.decode.sampling import Sampling
from pax.models import kv_cache
from pax.models.transformer import TransformerLm
from pax.parallel import sharding
from tests.helpers import Tiny, derive

GREEDY = Sampling("greedy")
SAMPLE = Sampling("sample", temperature=1.3, top_k=40, top_p=0.95)
# Prompt lengths of one batch: all pad to one bucket of 16; one fills it exactly.
LENGTHS = (5, 11, 16, 1)


@functools.cache
def _model(**attrs):
    # One model and parameters per configuration for the whole module: tests only read them.
    cfg = derive(Tiny, **attrs)().task().model
    model = TransformerLm(cfg)
    tokens = np.zeros((1, cfg.seq_len), np.int32)
    # Random values of the parameters' shapes, made on the host and put on the device: no
    # init program is compiled (every claim here holds for any parameters).
    shapes = nn.unbox(jax.eval_shape(model.init, jax.random.key(0), tokens)["params"])
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda a: rng.normal(0, 0.1, a.shape).astype(a.dtype), shapes)
    return model, {"params": jax.device_put(params)}


def _prompts(lengths=LENGTHS, seed=3):
    rng = np.random.default_rng(seed)
    return [
        prompts_lib.Prompt(f"p{i}", rng.integers(1, 256, n).astype(np.int32))
        for i, n in enumerate(lengths)
    ]


@functools.cache
def _compiled(cfg, max_new, sampling, eos_id):
    # One jit per decoder: tests that decode several times compile once per shape.
    return jax.jit(gen.make_generate(gen.decode_model(cfg), max_new, sampling, eos_id, True))


def _generate(model, variables, batch, max_new, sampling=GREEDY, eos_id=-1, seed=0):
    fn = _compiled(model.cfg, max_new, sampling, eos_id)
    out = fn(variables, batch.tokens, batch.positions, batch.segment_ids, batch.rows, seed)
    return jax.device_get(out)


@functools.cache
def _apply(cfg):
    return jax.jit(TransformerLm(cfg).apply)


def _full_logits(model, variables, ids, positions=None, segment_ids=None):
    """The model on the whole sequence in one pass: no cache, no padding before it. Zeros
    after it fill SEQ_LEN, so every sequence is one compiled shape: causal attention never
    lets a position see the ones after it. Positions count from 0 and the tokens are one
    segment unless given: every call passes all three, one compiled program per model."""
    n, seq_len = len(ids), model.cfg.seq_len
    positions = np.arange(n) if positions is None else positions
    segment_ids = np.ones(n) if segment_ids is None else segment_ids

    def pad(a):
        return np.pad(np.asarray(a, np.int32), (0, seq_len - n))[None]

    out = _apply(model.cfg)(variables, pad(ids), pad(positions), pad(segment_ids))
    return np.asarray(out)[0, :n]


@pytest.mark.parametrize(
    "attrs, sampling",
    [
        ({}, SAMPLE),  # rotary positions
        # Learned positions' cache: the fast tier has them in the packed-prompt test.
        pytest.param(dict(POSITION_EMBEDDING="learned"), SAMPLE, marks=pytest.mark.slow),
        (dict(USE_REPEATED_LAYER=False, NUM_KV_HEADS=2, ACTIVATION="swiglu"), GREEDY),
        # Trained with memory savers: decoding drops them, the parameters are the same.
        pytest.param(
            dict(REMAT_POLICY="full", ATTENTION_QUERY_CHUNK=8), GREEDY, marks=pytest.mark.slow
        ),
    ],
)
def test_cached_logits_are_those_of_the_full_sequence(attrs, sampling):
    model, variables = _model(**attrs)
    prompts = _prompts()
    (_, batch) = next(prompts_lib.batches(prompts, 8, 1, model.cfg.seq_len))
    out = _generate(model, variables, batch, max_new=8, sampling=sampling)
    assert out["counts"].tolist() == [8] * len(prompts)
    # Query chunks need a sequence they divide; the chunked math is the same (test_model).
    reference = TransformerLm(dataclasses.replace(model.cfg, attention_query_chunk=0))
    for row, prompt in enumerate(prompts):
        new = out["tokens"][row]
        full = _full_logits(reference, variables, np.concatenate([prompt.ids, new]))
        # Token i was drawn from the logits after prompt + new[:i]: position len(prompt) + i - 1.
        expected = full[len(prompt.ids) - 1 : len(prompt.ids) - 1 + len(new)]
        np.testing.assert_allclose(out["logits"][row], expected, atol=2e-5, rtol=1e-5)
        if sampling is GREEDY:
            np.testing.assert_array_equal(new, expected.argmax(-1))


# Rotary positions' packed prompts: the slow tier (the fast one has rotary in the cached-logits
# test, and learned positions' packing here).
@pytest.mark.parametrize(
    "attrs", [pytest.param({}, marks=pytest.mark.slow), dict(POSITION_EMBEDDING="learned")]
)
def test_packed_prompt_continues_its_last_document(attrs):
    """A prefill of two packed documents (segment ids 1, 2; positions restart): generation
    continues document 2 exactly as the full packed row computes it, and as document 2 alone."""
    model, variables = _model(**attrs)
    rng = np.random.default_rng(0)
    doc1, doc2 = rng.integers(1, 256, 7), rng.integers(1, 256, 9)
    ids = np.concatenate([doc1, doc2]).astype(np.int32)
    positions = np.concatenate([np.arange(7), np.arange(9)]).astype(np.int32)
    segments = np.concatenate([np.full(7, 1), np.full(9, 2)]).astype(np.int32)
    batch = gen.Prompts(ids[None], positions[None], segments[None], np.zeros(1, np.int32))
    out = _generate(model, variables, batch, max_new=6)
    new = out["tokens"][0]
    full = _full_logits(
        model,
        variables,
        np.concatenate([ids, new]),
        np.concatenate([positions, 9 + np.arange(6)]),
        np.concatenate([segments, np.full(6, 2)]),
    )
    np.testing.assert_allclose(out["logits"][0], full[15:21], atol=2e-5, rtol=1e-5)
    alone = _full_logits(model, variables, np.concatenate([doc2, new]))
    np.testing.assert_allclose(out["logits"][0], alone[8:14], atol=2e-5, rtol=1e-5)


def test_only_a_mutable_cache_collection_makes_a_cache():
    model, variables = _model()
    tokens = np.random.default_rng(1).integers(0, 256, (2, 32), np.int32)
    # init makes every collection mutable, and still creates no cache.
    assert set(jax.eval_shape(model.init, jax.random.key(0), tokens)) == {"params"}

    def both(v, t):  # one program, not one per op
        return model.apply(v, t), model.apply(v, t, mutable=[kv_cache.COLLECTION])

    plain, (cached, state) = jax.jit(both)(variables, tokens)
    # A cache created by this call holds just its tokens: attention is the plain one.
    # (layers, batch, kv heads, length, dims)
    assert state[kv_cache.COLLECTION]["layers"]["attention"]["key"].shape == (2, 2, 4, 32, 16)
    np.testing.assert_allclose(cached, plain, atol=1e-5)


def test_eos_ends_a_row_and_is_not_counted():
    model, variables = _model()
    (_, batch) = next(prompts_lib.batches(_prompts(), 8, 1, 32))
    free = _generate(model, variables, batch, max_new=8)
    eos = int(free["tokens"][0, 3])  # row 0's fourth token becomes the end-of-sequence token
    stopped = _generate(model, variables, batch, max_new=8, eos_id=eos)
    for row in range(len(LENGTHS)):
        tokens = free["tokens"][row].tolist()
        first = tokens.index(eos) if eos in tokens else None
        if first is None:
            assert stopped["counts"][row] == 8 and stopped["stops"][row] == 0
            continue
        assert stopped["counts"][row] == first
        assert gen.STOPS[stopped["stops"][row]] == "eos"
        assert stopped["tokens"][row, : first + 1].tolist() == tokens[: first + 1]
        assert (stopped["tokens"][row, first + 1 :] == gen.NO_TOKEN).all()


def test_a_row_stops_at_the_last_position_the_model_has():
    model, variables = _model()  # SEQ_LEN 32
    (_, batch) = next(prompts_lib.batches(_prompts((30, 2)), 8, 1, 32))
    out = _generate(model, variables, batch, max_new=8)
    # Positions 30, 31 and 32: the token at position 32 (SEQ_LEN) cannot be fed back.
    assert out["counts"].tolist() == [3, 8]
    assert [gen.STOPS[s] for s in out["stops"]] == ["seq_len", "max_new_tokens"]


def test_a_prompts_sample_depends_on_its_seed_not_on_its_batch():
    model, variables = _model()
    prompts = _prompts()
    (_, batch) = next(prompts_lib.batches(prompts, 8, 1, 32))
    a = _generate(model, variables, batch, 8, SAMPLE, seed=7)["tokens"]
    b = _generate(model, variables, batch, 8, SAMPLE, seed=7)["tokens"]
    c = _generate(model, variables, batch, 8, SAMPLE, seed=8)["tokens"]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # Prompt 2 decoded alone, in a batch of its own with another bucket, draws the same tokens.
    alone = gen.Prompts(
        batch.tokens[2:3], batch.positions[2:3], batch.segment_ids[2:3], batch.rows[2:3]
    )
    np.testing.assert_array_equal(
        _generate(model, variables, alone, 8, SAMPLE, seed=7)["tokens"][0], a[2]
    )


def test_sharded_decoding_matches_one_device_and_splits_the_cache():
    cfg = derive(Tiny, ICI_MESH_SHAPE=(1, 2, 4))().task().model
    mesh = Mesh(np.asarray(jax.devices()[:8]).reshape(1, 2, 4), ("replica", "data", "mdl"))
    model, variables = _model()
    prompts = _prompts()
    (_, batch) = next(prompts_lib.batches(prompts, 8, 2, 32))
    expected = _generate(model, variables, batch, 8)

    shardings = jax.tree.map(
        lambda spec, p: sharding.logical_sharding(tuple(spec), p.shape, mesh),
        _logical_specs(model),
        variables["params"],
        is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec),
    )
    # From the host: a device array's resharding compiles a program per leaf shape.
    placed = {"params": jax.device_put(jax.device_get(variables["params"]), shardings)}
    generator = gen.Generator(cfg, mesh, {"params": shardings}, 8, GREEDY, with_logits=True)
    out = generator(placed, batch, seed=0)
    np.testing.assert_array_equal(out.tokens, expected["tokens"])
    np.testing.assert_allclose(out.logits, expected["logits"], atol=2e-5, rtol=1e-5)

    # Where the cache lives: batch over (replica, data), kv heads over mdl.
    sharded_model = gen.decode_model(cfg, mesh)

    def prefill(v, tokens):
        cache = kv_cache.init(sharded_model, v, tokens.shape[0], 24)
        return sharded_model.apply({**v, "cache": cache}, tokens, mutable=["cache"])[1]

    cache = jax.jit(prefill)(placed, batch.tokens)["cache"]
    key = cache["layers"]["attention"]["key"]  # (layers, batch, kv heads, length, dims)
    assert key.shape == (2, 4, 4, 24, 16)
    spec = key.sharding.spec
    assert tuple(spec)[1] == ("replica", "data") or tuple(spec)[1] == "data"
    assert tuple(spec)[2] == "mdl"


def _logical_specs(model):
    boxed = jax.eval_shape(
        lambda: model.init(jax.random.key(0), jnp.zeros((1, model.cfg.seq_len), jnp.int32))
    )["params"]
    return nn.get_partition_spec(boxed)


def test_one_compilation_per_shape_bucket():
    cfg = Tiny().task().model
    mesh = Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1, 1), ("replica", "data", "mdl"))
    model, variables = _model()
    shardings = jax.tree.map(lambda _: sharding.replicated(mesh), variables)
    generator = gen.Generator(cfg, mesh, shardings, 4, GREEDY)
    short = _prompts((3, 5, 9, 12), seed=1)  # bucket 16
    longer = _prompts((20, 17), seed=2)  # bucket 32
    for group in (short[:2], short[2:], longer, short[1:3]):  # 2 rows each
        for _, batch in prompts_lib.batches(group, 4, 1, 32):
            generator(variables, batch, seed=0)
    assert generator._generate._cache_size() == 2


def test_unscan_lays_out_the_stacked_layers_as_an_unrolled_model_has_them():
    """Generation decodes repeated layers unrolled: the unrolled model on unscanned variables
    has the scanned model's parameter tree, layer by layer, and computes the same logits."""
    model, variables = _model()
    unrolled_model = TransformerLm(dataclasses.replace(model.cfg, use_repeated_layer=False))
    tokens = np.random.default_rng(2).integers(0, 256, (2, 32), np.int32)
    unrolled_shapes = jax.eval_shape(unrolled_model.init, jax.random.key(0), tokens)["params"]
    # On host arrays: slicing the stack is numpy's, not one compiled program per leaf.
    variables = jax.device_get(variables)
    stacked = variables["params"]["layers"]
    unrolled = gen.unscan({**variables, "other": {"layers": stacked, "x": 1}}, 2)
    assert jax.tree.structure(unrolled["params"]) == jax.tree.structure(nn.unbox(unrolled_shapes))
    for i in range(2):
        np.testing.assert_array_equal(
            unrolled["params"][f"layer_{i}"]["ffn"]["wi"], stacked["ffn"]["wi"][i]
        )
    assert set(unrolled["other"]) == {"layer_0", "layer_1", "x"}  # every collection, the rest kept

    def both(unrolled_params, v):
        return unrolled_model.apply({"params": unrolled_params}, tokens), model.apply(v, tokens)

    np.testing.assert_allclose(*jax.jit(both)(unrolled["params"], variables), atol=1e-5)
