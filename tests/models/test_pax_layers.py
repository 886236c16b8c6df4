"""The model's praxis features, each against a value computed here by hand or another way:
sinusoidal positions, PerDimScale, LayerNorm's offset scale, Xavier with praxis's fans,
biases where praxis has them, Pax's embedding scaling and softmax bias."""

import dataclasses
import math

import flax.linen
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pax.models import base
from pax.models.positions import sinusoids
from pax.models.transformer import TransformerLm
from tests.helpers import Tiny, derive


def _init(cfg, seed=0, batch=2):
    model = TransformerLm(cfg)
    tokens = np.random.RandomState(1).randint(0, cfg.vocab_size, (batch, cfg.seq_len))
    return model, jax.jit(model.init)(jax.random.key(seed), tokens)["params"], tokens


def _param_shapes(cfg):
    """The parameters CFG's model creates, as shapes and dtypes: no init program to compile."""
    model = TransformerLm(cfg)
    tokens = jax.ShapeDtypeStruct((2, cfg.seq_len), jnp.int32)
    return jax.eval_shape(model.init, jax.random.key(0), tokens)["params"]


def _cfg(**attrs):
    return derive(Tiny, **attrs)().task().model


def test_sinusoids_are_praxis_positional_embedding():
    # praxis PositionalEmbedding, dims 6: 3 timescales 1, 100, 10000 (log increment ln(1e4)/2),
    # first the sines, then the cosines.
    got = np.asarray(jax.jit(sinusoids, static_argnums=1)(np.array([[0, 1, 7]]), 6))
    inv = np.array([1.0, 1e-2, 1e-4])
    for i, p in enumerate([0, 1, 7]):
        expected = np.concatenate([np.sin(p * inv), np.cos(p * inv)])
        np.testing.assert_allclose(got[0, i], expected, rtol=1e-5, atol=1e-7)
    odd = jax.eval_shape(lambda p: sinusoids(p, 5), jax.ShapeDtypeStruct((1, 2), jnp.float32))
    assert odd.shape == (1, 2, 5)  # odd dims: zero-padded


def _layer_inputs(model, params, tokens):
    """What the first Transformer layer receives (unrolled layers, so it is a plain call); under
    jit, one program rather than one per op."""

    @jax.jit
    def layer_input(params):
        captured = []

        def grab(next_fun, args, kwargs, context):
            if context.module.name == "layer_0" and context.method_name == "__call__":
                captured.append(args[0])
            return next_fun(*args, **kwargs)

        with flax.linen.intercept_methods(grab):
            model.apply({"params": params}, tokens)
        return captured[0]

    return np.asarray(layer_input(params))


def test_sinusoidal_positions_are_added_to_the_scaled_embedding():
    cfg = _cfg(NUM_LAYERS=1, USE_REPEATED_LAYER=False)
    model, params, tokens = _init(cfg)
    table = np.asarray(params["embedding"].value)
    d = cfg.model_dims
    expected = table[tokens] * math.sqrt(d) + np.asarray(
        jax.jit(sinusoids, static_argnums=1)(
            np.broadcast_to(np.arange(cfg.seq_len), tokens.shape), d
        )
    )
    np.testing.assert_allclose(_layer_inputs(model, params, tokens), expected, rtol=1e-5, atol=1e-5)


def test_per_dim_scale_is_one_over_sqrt_dims_at_init_and_learns_a_factor():
    """praxis PerDimScale: q * 1.442695041 / sqrt(H) * softplus(p). With p = 0 that is exactly the
    fixed 1/sqrt(H) scaling (when H = D / heads); with p = log(3), softplus(p) = ln 4 = 2 ln 2,
    so queries are doubled: the same as the fixed scaling with the query weights doubled."""
    cfg = _cfg(NUM_LAYERS=1, USE_BIAS=True)
    fixed = dataclasses.replace(cfg, per_dim_scale=False)
    model, params, tokens = _init(cfg)
    # One program per model for both of its calls, rather than one per op.
    apply, apply_fixed = jax.jit(model.apply), jax.jit(TransformerLm(fixed).apply)
    assert np.all(np.asarray(params["layers"]["attention"]["per_dim_scale"].value) == 0)
    plain = jax.tree.map(lambda x: x, params)
    del plain["layers"]["attention"]["per_dim_scale"]
    a = apply({"params": params}, tokens)
    b = apply_fixed({"params": plain}, tokens)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)

    learned = jax.tree.map(lambda x: x, params)
    pds = learned["layers"]["attention"]["per_dim_scale"]
    learned["layers"]["attention"]["per_dim_scale"] = pds.replace_boxed(
        np.full(pds.value.shape, math.log(3.0), np.float32)
    )
    doubled = jax.tree.map(lambda x: x, plain)
    att = doubled["layers"]["attention"]
    qkv, qkv_bias = np.array(att["qkv"].value), np.array(att["qkv_bias"].value)
    qkv[:, :, 0] *= 2.0
    qkv_bias[:, 0] *= 2.0
    att["qkv"] = att["qkv"].replace_boxed(qkv)
    att["qkv_bias"] = att["qkv_bias"].replace_boxed(qkv_bias)
    a = apply({"params": learned}, tokens)
    b = apply_fixed({"params": doubled}, tokens)
    np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4)


def test_layer_norm_keeps_its_scale_as_an_offset_from_one():
    cfg = _cfg(LAYERNORM_EPSILON=1e-3)
    x = np.float32(np.random.RandomState(3).randn(2, 5, 64) * 3 + 1)
    ln = base.LayerNorm(cfg)
    params = jax.jit(ln.init)(jax.random.key(0), x)["params"]
    apply = jax.jit(ln.apply)  # one program for both calls, rather than one per op
    assert np.abs(params["scale"].value).max() == 0.0  # praxis: scale init 0, used 1 + s
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    np.testing.assert_allclose(
        apply({"params": params}, x), (x - mean) / np.sqrt(var + 1e-3), rtol=1e-5, atol=1e-5
    )
    scaled = {
        "scale": params["scale"].replace_boxed(np.full((64,), 0.5, np.float32)),
        "bias": params["bias"].replace_boxed(np.full((64,), 2.0, np.float32)),
    }
    np.testing.assert_allclose(
        apply({"params": scaled}, x),
        1.5 * (x - mean) / np.sqrt(var + 1e-3) + 2.0,
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("combine", [True, False])
def test_xavier_limits_follow_praxis_fans(combine):
    """praxis Xavier: uniform(±1.000001·sqrt(6 / (fan_in + fan_out))), fans from praxis's shape of
    each weight: combined QKV [3, D, N, H] -> (3DN, 3DH); separate [D, N, H] -> (DN, DH);
    FFN [D, F] -> (D, F)."""
    cfg = _cfg(MODEL_DIMS=256, HIDDEN_DIMS=1024, NUM_HEADS=4, COMBINE_QKV=combine)
    _, params, _ = _init(cfg)
    d, n, h, f = 256, 4, 64, 1024
    rows = 3 * d if combine else d
    limits = {
        "qkv": 1.000001 * math.sqrt(6 / (rows * n + rows * h)),
        "post": 1.000001 * math.sqrt(6 / (d * n + d * h)),
        "wi": 1.000001 * math.sqrt(6 / (d + f)),
        "wo": 1.000001 * math.sqrt(6 / (f + d)),
    }
    layer = params["layers"]
    for name, limit in limits.items():
        w = np.asarray(
            (layer["attention"] if name in ("qkv", "post") else layer["ffn"])[name].value
        )
        assert np.abs(w).max() <= limit and np.abs(w).max() > 0.98 * limit, name
        assert np.std(w) == pytest.approx(limit / math.sqrt(3), rel=0.03), name
    # The shared embedding: Gaussian with std MODEL_DIMS^-0.5 (Pax's softmax_init).
    assert np.std(np.asarray(params["embedding"].value)) == pytest.approx(d**-0.5, rel=0.03)


def test_gaussian_init_is_gpt3s():
    cfg = _cfg(WEIGHT_INIT="gaussian", WEIGHT_INIT_SCALE=0.006, EMBEDDING_INIT_STD=0.006)
    _, params, _ = _init(cfg)
    for name in ("qkv", "post"):
        w = np.asarray(params["layers"]["attention"][name].value)
        assert np.std(w) == pytest.approx(0.006, rel=0.05)
    assert np.std(np.asarray(params["embedding"].value)) == pytest.approx(0.006, rel=0.05)


def test_biases_where_praxis_has_them():
    def names(**attrs):
        params = _param_shapes(_cfg(**attrs))
        flat = jax.tree_util.tree_flatten_with_path(params)[0]
        return {"/".join(str(k.key) for k in path if hasattr(k, "key")) for path, _ in flat}

    # LmCloudSpmd: no attention biases (USE_BIAS = False), praxis's FFN and softmax biases.
    default = names()
    assert {"layers/ffn/wi_bias", "layers/ffn/wo_bias", "softmax_bias"} <= default
    assert not {"layers/attention/qkv_bias", "layers/attention/post_bias"} & default
    gpt3 = names(USE_BIAS=True, SOFTMAX_HAS_BIAS=False, FFN_HAS_BIAS=True, PER_DIM_SCALE=False)
    assert {"layers/attention/qkv_bias", "layers/attention/post_bias"} <= gpt3
    assert "softmax_bias" not in gpt3 and "layers/attention/per_dim_scale" not in gpt3
    bare = names(FFN_HAS_BIAS=False, SOFTMAX_HAS_BIAS=False)
    assert not any(n.endswith("bias") and "norm" not in n for n in bare)


def test_softmax_bias_shifts_logits_and_the_cap_bounds_them():
    cfg = _cfg(NUM_LAYERS=1, SOFTMAX_CAP=0.0)
    model, params, tokens = _init(cfg)
    apply = jax.jit(model.apply)  # one program for both calls, rather than one per op
    base = np.asarray(apply({"params": params}, tokens))
    shift = np.arange(256, dtype=np.float32) / 256
    shifted = dict(params)
    shifted["softmax_bias"] = params["softmax_bias"].replace_boxed(shift)
    np.testing.assert_allclose(
        apply({"params": shifted}, tokens) - base, np.broadcast_to(shift, base.shape), atol=1e-5
    )


def test_embedding_scaling_follows_scale_sqrt_depth():
    """SCALE_SQRT_DEPTH multiplies the looked-up rows by sqrt(D) (praxis scale_sqrt_depth):
    the same layer inputs as no scaling over a table sqrt(D) times larger."""
    cfg = _cfg(NUM_LAYERS=1, POSITION_EMBEDDING="none", USE_REPEATED_LAYER=False)
    model, params, tokens = _init(cfg)
    unscaled = TransformerLm(dataclasses.replace(cfg, scale_sqrt_depth=False))
    bigger = dict(params)
    factor = math.sqrt(cfg.model_dims)
    bigger["embedding"] = params["embedding"].replace_boxed(params["embedding"].value * factor)
    np.testing.assert_allclose(
        _layer_inputs(model, params, tokens),
        _layer_inputs(unscaled, bigger, tokens),
        rtol=1e-5,
        atol=1e-5,
    )


def test_param_dtype_and_layernorm_epsilon_are_settable():
    cfg = _cfg(PARAM_DTYPE="bfloat16", LAYERNORM_EPSILON=1e-5)
    assert cfg.layernorm_epsilon == 1e-5
    params = _param_shapes(cfg)
    assert {str(leaf.dtype) for leaf in jax.tree.leaves(params)} == {"bfloat16"}
