import dataclasses
import functools
import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from pax.errors import UsageError
from pax.models import kernels, platform, transformer
from pax.models.positions import rotary
from pax.models.transformer import PADDING_LOGIT, TransformerLm, cross_entropy, lm_loss
from pax.train.instantiate import instantiate
from tests.helpers import Tiny, derive


# Built once per experiment class: several tests share Tiny's model, parameters and programs.
@functools.cache
def _model_and_params(experiment_cls):
    cfg = experiment_cls().task().model
    model = TransformerLm(cfg)
    tokens = jax.random.randint(jax.random.key(1), (2, cfg.seq_len), 0, cfg.vocab_size)
    params = jax.jit(model.init)(jax.random.key(0), tokens)["params"]
    return model, params, tokens


@functools.cache
def _apply(experiment_cls):
    """The jitted forward pass of EXPERIMENT_CLS's model: one program for all its calls."""
    return jax.jit(_model_and_params(experiment_cls)[0].apply)


def _targets(tokens):
    # Independent of the inputs: with tied embeddings, inputs as targets would be too easy.
    return jax.random.randint(jax.random.key(2), tokens.shape, 0, 256)


# lm_loss as one program rather than an eager program per op.
_lm_loss = jax.jit(lm_loss)


# Packed rows of Tiny's length: three documents each, so the segment mask is in play.
_SEGMENTS = np.broadcast_to(np.repeat(np.arange(1, 4), [10, 12, 10]), (2, 32))


def _loss_and_grads(model, params, tokens):
    def loss(p):
        logits = model.apply({"params": p}, tokens, segment_ids=_SEGMENTS)
        return lm_loss(logits, _targets(tokens), jnp.ones(tokens.shape))[0]

    return jax.jit(jax.value_and_grad(loss))(params)


@functools.cache
def _tiny_loss_and_grads():
    """Tiny's loss and gradients on packed rows, which the remat / unroll variants and the
    query-chunked attention are compared with."""
    return _loss_and_grads(*_model_and_params(Tiny))


def test_shapes_and_initial_loss_near_uniform():
    _, params, tokens = _model_and_params(Tiny)
    logits = _apply(Tiny)({"params": params}, tokens)
    assert logits.shape == (2, 32, 256) and logits.dtype == jnp.float32
    loss, metrics = _lm_loss(logits, _targets(tokens), jnp.ones(tokens.shape))
    # A fresh model is close to uniform: unit-scale logits add about 0.5 nats to ln(256).
    assert abs(float(loss) - math.log(256)) < 1.5
    assert float(metrics["num_tokens"]) == 64
    assert float(metrics["log_pplx"]) == float(loss)


def test_repeated_layers_stack_parameters_on_a_layers_axis():
    _, params, _ = _model_and_params(Tiny)
    qkv = params["layers"]["attention"]["qkv"]
    assert qkv.value.shape == (2, 64, 3, 4, 16)  # (layers, embed, q/k/v, heads, dims)
    assert qkv.names == ("layers", "embed", None, "heads", "kv")


def test_causal_future_tokens_do_not_change_past_logits():
    _, params, tokens = _model_and_params(Tiny)
    changed = np.array(tokens)
    changed[:, 20:] = (changed[:, 20:] + 7) % 256
    a = _apply(Tiny)({"params": params}, tokens)
    b = _apply(Tiny)({"params": params}, changed)
    np.testing.assert_allclose(a[:, :20], b[:, :20], atol=1e-5)
    assert not np.allclose(a[:, 20:], b[:, 20:], atol=1e-3)


@pytest.mark.parametrize(
    "attrs",
    [
        dict(NUM_KV_HEADS=2),
        dict(POSITION_EMBEDDING="learned"),
        dict(ACTIVATION="swiglu"),
        dict(ACTIVATION="gelu", SEPARATE_EMBEDDING=True),
        dict(USE_REPEATED_LAYER=False),
        dict(FPROP_DTYPE="bfloat16"),
    ],
)
def test_variants_build_and_give_finite_near_uniform_loss(attrs):
    model = TransformerLm(derive(Tiny, **attrs)().task().model)
    tokens = _model_and_params(Tiny)[2]

    @jax.jit  # initialization and loss as one program: no test reuses these parameters
    def initial_loss(tokens):
        logits = model.apply(model.init(jax.random.key(0), tokens), tokens)
        return lm_loss(logits, _targets(tokens), jnp.ones(tokens.shape))[0]

    assert abs(float(initial_loss(tokens)) - math.log(256)) < 1.5


def test_grouped_query_attention_shares_kv_heads():
    model = TransformerLm(derive(Tiny, NUM_KV_HEADS=2)().task().model)
    tokens = jax.ShapeDtypeStruct((2, model.cfg.seq_len), jnp.int32)
    params = jax.eval_shape(model.init, jax.random.key(0), tokens)["params"]
    # 2 kv heads, each with a group of 2 query heads plus its key and value.
    assert params["layers"]["attention"]["qkv"].value.shape == (2, 64, 4, 2, 16)


@pytest.mark.parametrize(
    "change",
    [
        {"remat_policy": "full"},
        {"remat_policy": "save_dot_for_mlperf_200b"},
        {"layer_scan_unroll": 1},  # Tiny unrolls its 2 repeated layers; here they loop
    ],
)
def test_remat_and_scan_unroll_change_speed_and_memory_not_math(change):
    base_model, params, tokens = _model_and_params(Tiny)
    assert base_model.cfg.use_repeated_layer and base_model.cfg.layer_scan_unroll > 1
    remat_model = TransformerLm(dataclasses.replace(base_model.cfg, **change))
    g1 = _tiny_loss_and_grads()[1]
    g2 = _loss_and_grads(remat_model, params, tokens)[1]
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


# The plain layers in the slow tier: the fast tier casts the same weights with biases, a gated
# FFN and grouped heads besides.
@pytest.mark.parametrize(
    "attrs",
    [
        pytest.param({}, marks=pytest.mark.slow),
        {"USE_BIAS": True, "ACTIVATION": "swiglu", "NUM_KV_HEADS": 2},
    ],
)
def test_bf16_layers_cast_their_weights_before_the_scan_and_leave_the_math_alone(
    attrs, monkeypatch
):
    """With bf16 activations and float32 parameters, the scanned layers' weight gradients leave
    the backward loop in bf16, and loss and gradients are bit for bit those of the cast done
    inside each layer (biases, gated FFN and grouped heads included)."""
    model, params, tokens = _model_and_params(derive(Tiny, FPROP_DTYPE="bfloat16", **attrs))
    assert model.cfg.use_repeated_layer and model.cfg.param_dtype == "float32"

    def loss(p):
        logits = model.apply({"params": p}, tokens)
        return lm_loss(logits, _targets(tokens), jnp.ones(tokens.shape))[0]

    # The scans are checked in the very trace that is then compiled and run.
    traced = jax.jit(jax.value_and_grad(loss)).trace(params)
    scans = [e for e in traced.jaxpr.eqns if e.primitive.name == "scan"]
    stacked = [v.aval for e in scans for v in e.outvars if len(v.aval.shape) >= 3]
    ffn = params["layers"]["ffn"]["wi"].value.shape
    assert any(a.shape == ffn and a.dtype == jnp.bfloat16 for a in stacked)
    assert not any(a.shape == ffn and a.dtype == jnp.float32 for a in stacked)

    ours = traced.lower().compile()(params)
    monkeypatch.setattr(transformer, "_compute_dtype_matrices", lambda dtype: lambda v: v)
    inside = jax.jit(jax.value_and_grad(loss))(params)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(inside)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "eqn, x_shape, w_shape",
    [
        ("bte,ecnd->btcnd", (2, 5, 8), (8, 3, 2, 4)),  # fused QKV
        ("btgnd,gnde->bte", (2, 5, 2, 2, 4), (2, 2, 4, 8)),  # attention output
        ("bte,egh->btgh", (2, 5, 8), (8, 2, 6)),  # gated feed-forward
        ("bth,he->bte", (2, 5, 6), (6, 8)),
    ],
)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_weight_einsum_gradients_are_autodiffs(eqn, x_shape, w_shape, dtype):
    rng = np.random.RandomState(0)
    x = jnp.asarray(rng.randn(*x_shape), dtype)
    w = jnp.asarray(rng.randn(*w_shape), dtype)
    probe = jnp.asarray(rng.randn(*np.einsum(eqn, np.ones(x_shape), np.ones(w_shape)).shape), dtype)

    def grads(einsum):
        return jax.grad(lambda x, w: (einsum(x, w) * probe).astype(jnp.float32).sum(), (0, 1))(x, w)

    ours = jax.jit(lambda: grads(lambda x, w: kernels.weight_einsum(eqn, x, w)))()
    plain = jax.jit(lambda: grads(lambda x, w: jnp.einsum(eqn, x, w)))()
    tol = 1e-6 if dtype == jnp.float32 else 2e-2
    for a, b in zip(ours, plain):
        assert a.dtype == b.dtype == dtype
        np.testing.assert_allclose(np.float32(a), np.float32(b), rtol=tol, atol=tol)


@pytest.mark.parametrize("bias_shape", [(16,), (3, 2, 4)])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_add_bias_gradient_is_the_sum_over_batch_and_length(bias_shape, dtype):
    rng = np.random.RandomState(0)
    y = jnp.asarray(rng.randn(4, 512, *bias_shape), dtype)
    b = jnp.asarray(rng.randn(*bias_shape), dtype)
    probe = jnp.asarray(rng.randn(*y.shape), dtype)
    dy, db = jax.jit(
        jax.grad(lambda y, b: (kernels.add_bias(y, b) * probe).astype(jnp.float32).sum(), (0, 1))
    )(y, b)
    np.testing.assert_array_equal(np.float32(dy), np.float32(probe))
    exact = np.float64(probe).sum(axis=(0, 1))  # 2048 terms each
    assert db.dtype == dtype
    # float32 accumulation: bf16 results are the exact sum rounded once (8 bits: 2^-8).
    tol = 1e-5 if dtype == jnp.float32 else 2**-8
    np.testing.assert_allclose(np.float64(db), exact, rtol=tol, atol=tol * np.abs(exact).max())


# Every CPU kernel in play: attention and FFN biases, a gated FFN, grouped heads, rotary
# positions (their sin/cos table) and the capped softmax.
_KERNELS = derive(
    Tiny,
    CPU_KERNELS="on",
    NUM_KV_HEADS=2,
    ACTIVATION="swiglu",
    USE_BIAS=True,
    FFN_HAS_BIAS=True,
    USE_ROTARY_POSITION_EMB=True,
)


def _loss(model, tokens):
    def loss(p):
        logits = model.apply({"params": p}, tokens)
        return lm_loss(logits, _targets(tokens), jnp.ones(tokens.shape))[0]

    return loss


@functools.cache
def _kernels_loss_and_grads():
    """_KERNELS's loss and gradients with the CPU kernels, which autodiff's forms and
    CPU_KERNELS=off are compared with."""
    model, params, tokens = _model_and_params(_KERNELS)
    return jax.jit(jax.value_and_grad(_loss(model, tokens)))(params)


def test_model_gradients_are_autodiffs(monkeypatch):
    """The whole model (GQA, gated FFN, biases) against autodiff's own einsum and add gradients."""
    model, params, tokens = _model_and_params(_KERNELS)
    ours = _kernels_loss_and_grads()[1]
    monkeypatch.setattr(kernels, "weight_einsum", lambda eqn, x, w: jnp.einsum(eqn, x, w))
    monkeypatch.setattr(kernels, "add_bias", lambda y, b: y + b)
    monkeypatch.setattr(kernels, "capped_softmax", _autodiff_capped_softmax)
    theirs = jax.jit(jax.grad(_loss(model, tokens)))(params)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)


def _autodiff_capped_softmax(logits, mask, cap):
    """Attention's probabilities as written before kernels.capped_softmax: the masked capped logits
    through jax.nn.softmax, which subtracts their max."""
    capped = jnp.where(mask, cap * jnp.tanh(logits / cap), jnp.finfo(jnp.float32).min)
    return jax.nn.softmax(capped, axis=-1)


@pytest.mark.parametrize("cap", [50.0, kernels.CAP_WITHOUT_MAX])
def test_capped_softmax_and_its_gradient_are_autodiffs(cap):
    """Without the max subtracted, even logits far beyond the cap neither overflow nor vanish; a
    row with every key masked attends to nothing (autodiff's form spreads it evenly)."""
    rng = np.random.RandomState(0)
    logits = np.float32(rng.randn(2, 3, 16, 16) * 10 * cap)
    mask = np.broadcast_to(np.tril(np.ones((16, 16), bool)), logits.shape).copy()
    mask[:, :, 5] = False  # query 5 sees nothing
    cotangent = np.float32(rng.randn(*logits.shape))
    seen = np.broadcast_to(mask.any(-1, keepdims=True), logits.shape)

    @jax.jit
    def forms(x):
        def grad(f):
            return jax.grad(lambda x: (f(x, mask, cap) * cotangent).sum())(x)

        ours, theirs = (f(x, mask, cap) for f in (kernels.capped_softmax, _autodiff_capped_softmax))
        return ours, theirs, grad(kernels.capped_softmax), grad(_autodiff_capped_softmax)

    ours, theirs, ours_grad, their_grad = map(np.asarray, forms(logits))
    assert np.isfinite(ours).all() and (ours[:, :, 5] == 0).all()
    np.testing.assert_allclose(ours.sum(-1)[seen[..., 0]], 1.0, rtol=1e-6)
    np.testing.assert_allclose(
        np.where(seen, ours, 0), np.where(seen, theirs, 0), rtol=1e-5, atol=1e-7
    )
    np.testing.assert_allclose(
        np.where(seen, ours_grad, 0), np.where(seen, their_grad, 0), rtol=1e-4, atol=1e-6
    )


def test_rotary_is_praxis_rotary_positional_embedding():
    """praxis/layers/embedding_softmax.py RotaryPositionalEmbedding (PositionalEmbedding's
    min_timescale 1, max_timescale 10_000): timescale_i = 10_000^(2i / dims), and the halves
    (a, b) of each head become (a cos - b sin, b cos + a sin) at position / timescale. Written
    here in float64 numpy, on packed positions that restart mid-row."""
    dims = 16
    rng = np.random.RandomState(0)
    x = rng.randn(2, 7, 3, dims).astype(np.float32)
    positions = np.array([[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 0, 1, 2, 3]])
    timescale = 10_000.0 ** (2 * np.arange(dims // 2) / dims)
    angle = positions[:, :, None, None] / timescale
    a, b = np.split(x.astype(np.float64), 2, axis=-1)
    expected = np.concatenate(
        [a * np.cos(angle) - b * np.sin(angle), b * np.cos(angle) + a * np.sin(angle)], axis=-1
    )
    ours = jax.jit(rotary)(x, positions)
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-5)


def test_softmax_cap_bounds_logits():
    experiment = derive(Tiny, SOFTMAX_CAP=2.0)
    _, params, tokens = _model_and_params(experiment)
    assert np.abs(_apply(experiment)({"params": params}, tokens)).max() < 2.0


def test_loss_ignores_zero_weight_tokens():
    logits = np.float32(np.random.RandomState(0).randn(1, 4, 8))
    targets = np.array([[1, 2, 3, 4]])
    weights = np.array([[1.0, 1.0, 0.0, 0.0]])
    loss, metrics, logp = jax.jit(lambda x: (*lm_loss(x, targets, weights), jax.nn.log_softmax(x)))(
        logits
    )
    expected = -(logp[0, 0, 1] + logp[0, 1, 2]) / 2
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    assert float(metrics["num_tokens"]) == 2


def test_cross_entropy_and_its_gradient_are_optax_softmax_cross_entropy():
    """The masked-sum pick of the target's logit is optax's gather, value and gradient,
    padded ids' logits included."""
    rng = np.random.RandomState(0)
    logits = np.float32(4 * rng.randn(2, 5, 11))
    logits[..., -2:] = PADDING_LOGIT
    targets = rng.randint(0, 9, (2, 5))
    weights = np.arange(10.0, dtype=np.float32).reshape(2, 5)

    def theirs(x):
        return optax.softmax_cross_entropy_with_integer_labels(x, targets)

    @jax.jit
    def both(x):
        def grad(f):
            return jax.grad(lambda x: (f(x) * weights).sum())(x)

        ours = functools.partial(cross_entropy, targets=targets)
        return ours(x), theirs(x), grad(ours), grad(theirs)

    ours, their, ours_grad, their_grad = both(logits)
    np.testing.assert_array_equal(ours, their)
    np.testing.assert_allclose(ours_grad, their_grad, rtol=1e-6, atol=1e-7)


def test_query_chunked_attention_is_the_same_math():
    model, params, tokens = _model_and_params(Tiny)
    chunked = TransformerLm(dataclasses.replace(model.cfg, attention_query_chunk=8))
    # Packed rows (_SEGMENTS): the segment mask must apply inside every chunk too.
    whole, whole_grads = _tiny_loss_and_grads()
    parts, parts_grads = _loss_and_grads(chunked, params, tokens)
    assert float(parts) == pytest.approx(float(whole), rel=1e-6)
    for a, b in zip(jax.tree.leaves(whole_grads), jax.tree.leaves(parts_grads)):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_query_chunk_must_divide_the_sequence():
    with pytest.raises(UsageError, match="ATTENTION_QUERY_CHUNK=12 does not divide SEQ_LEN=32"):
        instantiate(derive(Tiny, ATTENTION_QUERY_CHUNK=12)())


def test_cpu_kernels_off_is_the_same_math_and_supports_forward_mode_autodiff():
    """CPU_KERNELS=off (the default off CPU) is plain jnp: the same loss and gradients as the
    CPU-tuned forms (custom VJPs: weight and bias gradients, the capped softmax; rotary's
    identity matmul), and jax.jvp / jax.linearize of the loss work, which custom VJPs forbid."""
    on_model, params, tokens = _model_and_params(_KERNELS)
    on_loss = _loss(on_model, tokens)
    off_loss = _loss(TransformerLm(dataclasses.replace(on_model.cfg, cpu_kernels="off")), tokens)
    assert on_model.cfg.atten_logit_cap > 0  # the capped softmax is in play
    on = _kernels_loss_and_grads()
    tangent = jax.tree.map(np.ones_like, params)

    # Traced under jit (as a step would be), not op by op; one program for the three forms.
    @jax.jit
    def off_forms(p, t):
        return (
            jax.value_and_grad(off_loss)(p),
            jax.jvp(off_loss, (p,), (t,)),
            jax.linearize(off_loss, p)[1](t),
        )

    off, (value, derivative), linearized = off_forms(params, tangent)
    np.testing.assert_allclose(off[0], on[0], rtol=1e-6)
    for a, b in zip(jax.tree.leaves(off[1]), jax.tree.leaves(on[1])):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(value, off[0], rtol=1e-6)
    expected = sum(float(np.asarray(g).sum()) for g in jax.tree.leaves(off[1]))
    np.testing.assert_allclose(derivative, expected, rtol=1e-4)
    np.testing.assert_allclose(linearized, derivative, rtol=1e-5)
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jit(lambda p, t: jax.jvp(on_loss, (p,), (t,)))(params, tangent)


@pytest.mark.parametrize("on", ["cpu", "gpu", "tpu"])
@pytest.mark.parametrize("setting", ["auto", "on", "off"])
def test_cpu_kernels_auto_keeps_the_capped_softmax_everywhere_and_the_rest_to_cpu(
    monkeypatch, setting, on
):
    """Traced for each platform (as pax.aot traces for a TPU from this host): `auto` takes the
    capped softmax everywhere and the XLA:CPU-tuned weight gradients on CPU only."""
    calls = {"capped_softmax": 0, "weight_einsum": 0}

    def counted(name):
        form = getattr(kernels, name)

        def call(*args):
            calls[name] += 1
            return form(*args)

        return call

    for name in calls:
        monkeypatch.setattr(kernels, name, counted(name))
    exp = derive(Tiny, CPU_KERNELS=setting, ATTENTION_KERNEL="xla")
    model = TransformerLm(exp().task().model)
    assert model.cfg.atten_logit_cap > 0
    tokens = jnp.zeros((2, 16), jnp.int32)
    with platform.target([types.SimpleNamespace(platform=on)]):
        variables = jax.eval_shape(model.init, jax.random.key(0), tokens)
        jax.eval_shape(model.apply, variables, tokens)
    assert bool(calls["capped_softmax"]) == (setting != "off")
    assert bool(calls["weight_einsum"]) == (setting == "on" or setting == "auto" and on == "cpu")
