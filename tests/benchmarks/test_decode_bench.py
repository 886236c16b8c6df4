"""The decode benchmark's predictions (benchmarks/decode/): bytes and roofline, by hand."""

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

from benchmarks.decode import memory, predict, sizes
from benchmarks.decode.measure import SmallDecodeBenchLm
from pax.decode import prompts as prompts_lib
from pax.decode.generate import decode_model, unscan
from pax.models import kv_cache
from pax.models.transformer import TransformerLm

SMALL = SmallDecodeBenchLm().task().model  # 1 layer, 64 dims, 2 heads of 32, FFN 128


def test_parameter_bytes_by_hand():
    # Layer: QKV 64·(2 + 2·2)·32 = 12288, output 2·32·64 = 4096, FFN 64·128 + 128·64 = 16384,
    # FFN biases 128 + 64, per-dim scale 32, two norms 4·64 = 256: 33248. Once: the tied
    # embedding 256·64 = 16384, softmax bias 256, final norm 128: 16768. 50016 f32: 200064 bytes.
    assert sizes.parameter_bytes(SMALL) == 200_064


def test_a_bf16_step_reads_the_weights_in_bf16():
    """Weights stored in float32 and used in bfloat16 are read as bfloat16 by a decode step
    (their casts leave the loop): half the bytes, 2 each; the cache as it is stored."""
    bf16 = dataclasses.replace(SMALL, fprop_dtype="bfloat16")
    assert sizes.read_dtype(SMALL) == np.float32 and sizes.read_dtype(bf16) == jnp.bfloat16
    cache = sizes.cache_bytes(bf16, 2, 40)
    assert sizes.step_bytes(bf16, 2, 1, 40) == 50_016 * 2 + cache
    assert sizes.step_bytes(SMALL, 2, 1, 40) == 200_064 + sizes.cache_bytes(SMALL, 2, 40)


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        dict(activation="swiglu", use_bias=True, num_kv_heads=1, per_dim_scale=False),
        dict(separate_embedding=True, softmax_has_bias=False, ffn_has_bias=False),
        dict(position_embedding="learned"),  # its table is read at a step's positions only
    ],
)
def test_parameter_bytes_are_the_models_parameters(attrs):
    cfg = dataclasses.replace(SMALL, num_layers=2, **attrs)
    params = jax.eval_shape(
        TransformerLm(cfg).init, jax.random.key(0), jnp.zeros((1, 8), jnp.int32)
    )["params"]
    params = nn.unbox(params)
    params.pop("position_embedding", None)
    assert sizes.parameter_bytes(cfg) == 4 * sum(
        math.prod(a.shape) for a in jax.tree.leaves(params)
    )


def test_cache_bytes_by_hand_and_as_the_generator_makes_the_cache():
    # Batch 2, 10 slots, 1 layer: keys and values 2·2·10·2 heads·32 dims·4 bytes = 10240,
    # slot positions and segment ids 2·2·10·4 = 160.
    assert sizes.cache_bytes(SMALL, 2, 10) == 10_400
    cfg = dataclasses.replace(SMALL, num_layers=3, num_kv_heads=1)
    model = decode_model(cfg)
    variables = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 8), jnp.int32))
    unrolled = model.clone(cfg=dataclasses.replace(cfg, use_repeated_layer=False))
    cache = jax.eval_shape(
        lambda v: kv_cache.init(unrolled, unscan(v, 3), 2, 10), nn.unbox(variables)
    )
    buffers = [a for a in jax.tree.leaves(cache) if a.ndim]  # not the write indices
    assert sizes.cache_bytes(cfg, 2, 10) == sum(a.size * a.dtype.itemsize for a in buffers)


def test_roofline_memory_bound_by_hand():
    """Peak so high that only bytes count: batch 2, prompt bucket 64, 3 new tokens."""
    r = predict.predicted_roofline(SMALL, 2, 64, 3, peak=1e30, bandwidth=1e9)
    # Cached: the prefill fills and each of 2 steps reads parameters + a 67-slot cache:
    # 200064 + (2·2·67·2·32·4 + 2·2·67·4 = 69680) = 269744 bytes, 3 times.
    assert r["cached_roofline_s"] == pytest.approx(3 * 269_744 / 1e9)
    # Recompute: steps over buckets 64, 128, 128; each the parameters plus its keys and values
    # (2·2·T·2·32 f32), written and read: 2048·T bytes.
    expected = 3 * 200_064 + 2048 * (64 + 128 + 128)
    assert r["recompute_roofline_s"] == pytest.approx(expected / 1e9)
    assert r["roofline_speedup"] == pytest.approx(expected / (3 * 269_744))


def test_roofline_without_a_memory_limit_is_the_flops_prediction():
    r = predict.predicted_roofline(SMALL, 4, 64, 40, peak=1e9, bandwidth=1e30)
    flops = predict.predicted_speedup(SMALL, 4, 64, 40)
    assert r["cached_roofline_s"] == pytest.approx(flops["cached_flops"] / 1e9)
    assert r["roofline_speedup"] == pytest.approx(flops["speedup"])


def test_roofline_takes_the_slower_of_compute_and_memory():
    assert predict.roofline_seconds(4e9, 1e9, peak=2e9, bandwidth=1e9) == 2.0
    assert predict.roofline_seconds(1e9, 3e9, peak=2e9, bandwidth=1e9) == 3.0


def test_decode_peak_memory_is_no_more_than_its_parts(tmp_path):
    """XLA's peak for decoding a restored run (two layers, so the stacked weights matter) is
    at most parameters + cache + activations. No tolerance: `activation_bytes` is already an
    upper bound (the largest stage's buffers all counted live at once), and XLA's temporaries
    are one buffer sized for the most bytes live at once."""
    cfg = dataclasses.replace(SMALL, num_layers=2)
    mesh = Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1, 1), ("replica", "data", "mdl"))
    model = decode_model(cfg)
    variables = nn.unbox(jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, 8), jnp.int32)))
    rng = np.random.default_rng(0)
    prompts = [prompts_lib.Prompt(str(i), rng.integers(1, 256, 12)) for i in range(4)]
    ((_, batch),) = prompts_lib.batches(prompts, 4, 1, cfg.seq_len)
    restored = memory.restored_variables(variables, mesh, str(tmp_path))
    m = memory.memory(cfg, mesh, restored, batch, new=8)
    assert m["decode"]["peak"] <= m["parts_bytes"]
    # The restore read the parameters only: the arguments are they and the prompts' three token
    # arrays, plus five int32 scalars where XLA counts them as arguments (jax 0.10 does; 0.12's
    # XLA passes them without a buffer of their own).
    extra = m["decode"]["arguments"] - m["parameter_bytes"] - 3 * batch.tokens.size * 4
    assert extra in (0, 4 * 4 + 4)
    # No step copies the cache: its temporaries could not hold one.
    assert m["step"]["temporaries"] < m["cache_bytes"]
    assert m["stacked_decode"]["peak"] >= m["decode"]["peak"]
