"""Decoder-only Transformer LM (Flax linen): praxis's TransformerLm, layer by layer.

What each piece follows in praxis (google/praxis, praxis/layers):
  embeddings        SharedEmbeddingSoftmax (embedding_softmax.py): one [vocab, D] table for
                    the lookup (times sqrt(D) with SCALE_SQRT_DEPTH) and the logits, plus a
                    vocab bias (its FeedForward's has_bias); SEPARATE_EMBEDDING: two tables
  positions         PositionalEmbedding (sinusoids, added to the embeddings) or
                    TrainablePositionalEmbedding (a learned [TRAINABLE_PE_MAX_SEQ_LEN, D] table);
                    USE_ROTARY_POSITION_EMB: RotaryPositionalEmbedding on queries and keys
  layer             Transformer with norm_policy 'pre' (transformers.py): x + attn(LN(x)), then
                    x + ffn(LN(x)); LayerNorm (normalizations.py) keeps its scale as an offset
                    from 1, which is what weight decay then pulls towards zero
  attention         DotProductAttention (attentions.py): QKV projection, optional biases,
                    queries scaled by PerDimScale (or 1/sqrt(D / heads)), logits capped by
                    ATTEN_LOGIT_CAP, causal and segment masks, output projection
  feed-forward      TransformerFeedForward: [D, F] (+ bias), activation, [F, D] (+ bias)
  initialization    praxis's default Xavier (uniform, praxis's fan-in/out of each weight's
                    praxis shape) or a Gaussian (Pax's GPT-3 configs); the embedding table a
                    Gaussian of std EMBEDDING_INIT_STD (Pax's softmax_init)
Layers are stacked with nn.scan (repeated layers) or unrolled, and rematerialized by a named
policy. The QKV projection is always one einsum over a fused weight (COMBINE_QKV only decides
the fans praxis would initialize with). Every parameter carries logical axis names; which mesh
axis each name lands on is decided by pax.parallel.sharding, never here.
"""

import functools
import itertools
import math
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from pax.experiments.config import ModelConfig
from pax.models import fp8, kv_cache
from pax.parallel import pipeline, sharding

REMAT_POLICIES = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "dots_with_no_batch_dims_saveable": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    # praxis SAVE_DOT_FOR_MLPERF_200B: keep the QKV projection, the attention context and the
    # output projection (named with checkpoint_name below), recompute the rest.
    "save_dot_for_mlperf_200b": jax.checkpoint_policies.save_only_these_names(
        "combined_qkv_proj", "context", "out_proj"
    ),
}
ACTIVATIONS = {"relu": nn.relu, "gelu": nn.gelu, "swiglu": nn.silu, "geglu": nn.gelu}
GATED = ("swiglu", "geglu")
ACT_AXES = ("batch", "length", "act_embed")
# A padded id's logit: finite, so no inf - inf, and exp() of it is 0 in float32.
PADDING_LOGIT = -1e9


# 1 / softplus(0): praxis PerDimScale's constant, so a zero-initialized scale is 1/sqrt(dims).
R_SOFTPLUS_0 = 1.442695041


def xavier(fan_in: int, fan_out: int, scale: float):
    """praxis WeightInit.Xavier: uniform in ±scale * sqrt(6 / (fan_in + fan_out))."""
    limit = scale * math.sqrt(6.0 / (fan_in + fan_out))

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -limit, limit)

    return init


def _boxed(init, names: tuple):
    return nn.with_logical_partitioning(init, names)


def sinusoids(positions, dims: int, min_timescale: float = 1.0, max_timescale: float = 1e4):
    """praxis PositionalEmbedding: [sin | cos] of positions over geometric timescales."""
    num_timescales = dims // 2
    increment = math.log(max_timescale / min_timescale) / max(num_timescales - 1, 1)
    inv_timescales = min_timescale * jnp.exp(jnp.arange(num_timescales) * -increment)
    scaled = positions[..., None].astype(jnp.float32) * inv_timescales
    signal = jnp.concatenate([jnp.sin(scaled), jnp.cos(scaled)], axis=-1)
    return jnp.pad(signal, [(0, 0)] * (signal.ndim - 1) + [(0, dims % 2)])


def _cap(logits, cap: float):
    """Pax's soft cap: cap * tanh(logits / cap); keeps logits in (-cap, cap)."""
    return cap * jnp.tanh(logits / cap) if cap > 0 else logits


# Capped logits lie in (-cap, cap): up to this cap, exp of them cannot overflow float32 (e^64 is
# 6e27) nor underflow to zero (e^-64 is 2e-28), so their softmax needs no max subtracted.
_CAP_WITHOUT_MAX = 64.0


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _capped_softmax(logits, mask, cap: float):
    """softmax(where(mask, cap * tanh(logits / cap), -inf)) over the last axis, in float32, for
    0 < cap <= _CAP_WITHOUT_MAX; a row with nothing unmasked is all zeros.

    Autodiff's form took four passes over the scores, the largest tensors of a layer: the capped
    logits written out (tanh's derivative wants them), their max, the exponentials and their sum,
    the quotient. Bounded logits need no max; keeping the logits rather than the capped ones
    lets XLA fuse the cap into the exponential, and its derivative into the softmax's backward.
    """
    return _capped_softmax_fwd(logits, mask, cap)[0]


def _capped_softmax_fwd(logits, mask, cap):
    e = jnp.where(mask, jnp.exp(cap * jnp.tanh(logits / cap)), 0.0)
    probs = e / jnp.maximum(jnp.sum(e, axis=-1, keepdims=True), jnp.finfo(jnp.float32).tiny)
    return probs, (logits, probs)


def _capped_softmax_bwd(cap, residuals, dprobs):
    logits, probs = residuals
    dcapped = probs * (dprobs - jnp.sum(dprobs * probs, axis=-1, keepdims=True))
    return dcapped * (1.0 - jnp.square(jnp.tanh(logits / cap))), None


_capped_softmax.defvjp(_capped_softmax_fwd, _capped_softmax_bwd)


ROTARY_TABLE_SCOPE = "rotary_sin_cos"


def _rotary(x, positions, max_wavelength: float = 10_000.0, table_matmul: bool = True):
    """Rotary position embedding over the last axis; x is (batch, length, ..., dims).
    table_matmul: sin and cos through an identity matmul (a CPU kernel, below)."""
    half = x.shape[-1] // 2
    freq = max_wavelength ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = positions[..., None].astype(jnp.float32) * freq  # (batch, length, half)
    shape = angle.shape[:2] + (1,) * (x.ndim - 3) + (half,)
    if not table_matmul:
        sin, cos = jnp.sin(angle).reshape(shape), jnp.cos(angle).reshape(shape)
        x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
        return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)
    # XLA counts sin and cos as cheap and fuses them into every use, here one per head and
    # half of every query and key: on CPU that was 3% of a bench step. A product with the
    # identity (exact at "highest" precision) is a matmul, which XLA does not fuse, so each
    # is computed once. Not model FLOPs: MFU's count leaves this scope out.
    with jax.named_scope(ROTARY_TABLE_SCOPE):
        identity = jnp.eye(half, dtype=jnp.float32)
        sin, cos = (
            jnp.matmul(f(angle), identity, precision="highest").reshape(shape)
            for f in (jnp.sin, jnp.cos)
        )
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def weight_einsum(eqn: str, x, w):
    """jnp.einsum(eqn, x, w) for an activation x and a weight w, with the weight gradient
    written as einsum(x, dy) rather than autodiff's einsum(dy, x).

    The order decides which operand XLA transposes to put the contracted (batch, length) axes
    where its matmul wants them: x, a stored activation, is then a plain copy; dy is the end
    of an elementwise chain (the activation's derivative, the residual stream's LayerNorm
    backward, growing layer by layer), and XLA:CPU fused that whole chain into the transposing
    copy, recomputing it there: 14% of a bench step's CPU time.
    """
    return jnp.einsum(eqn, x, w)


def _weight_einsum_fwd(eqn, x, w):
    return jnp.einsum(eqn, x, w), (x, w)


def _weight_einsum_bwd(eqn, residuals, dy):
    x, w = residuals
    ins, out = eqn.split("->")
    x_axes, w_axes = ins.split(",")
    dx = jnp.einsum(f"{out},{w_axes}->{x_axes}", dy, w)
    if x.dtype != jnp.float32:
        # In bfloat16 the merged form below is converted to float32 for a generic dot; this
        # 3-D one stays a bfloat16 matmul: 9% of a one-core bf16 bench step faster.
        return dx.astype(x.dtype), jnp.einsum(f"{x_axes},{out}->{w_axes}", x, dy).astype(w.dtype)
    # The axes dW contracts lead both x and dy (batch, length); merged into one, they make a
    # 2-D matmul that XLA:CPU reads x for transposed in place. Left 3-D, it copied x transposed
    # first, recomputing x's producer there: the feed-forward's GELU, 71 ms per layer of the
    # bench step against 49 ms for the matmul itself.
    shared = itertools.takewhile(lambda a: a[0] == a[1] and a[0] not in w_axes, zip(x_axes, out))
    lead = len(list(shared))
    dw = jnp.einsum(
        f"z{x_axes[lead:]},z{out[lead:]}->{w_axes}",
        x.reshape(-1, *x.shape[lead:]),
        dy.reshape(-1, *dy.shape[lead:]),
    )
    return dx.astype(x.dtype), dw.astype(w.dtype)


weight_einsum.defvjp(_weight_einsum_fwd, _weight_einsum_bwd)


@jax.custom_vjp
def add_bias(y, b):
    """y + b over y's leading (batch, length) axes, b's gradient summed in float32.

    Autodiff sums a bf16 gradient in bf16, which XLA:CPU runs as a float32 copy of dy cut into
    windows (reduce-window): 16 ms for a [8, 256, 2048] bias gradient of the bf16 bench step,
    against about 1 ms for a float32-accumulating sum; float32 accumulation is also the more
    accurate of the two.
    """
    return y + b


def _add_bias_fwd(y, b):
    return y + b, None


def _add_bias_bwd(_, dy):
    db = jnp.sum(dy, axis=(0, 1), dtype=jnp.float32)
    return dy, db.astype(dy.dtype)


add_bias.defvjp(_add_bias_fwd, _add_bias_bwd)


class _Sharded(nn.Module):
    cfg: ModelConfig
    mesh: Any = None
    rules: tuple = sharding.LOGICAL_AXIS_RULES

    @property
    def dtype(self):
        return jnp.dtype(self.cfg.fprop_dtype)

    @property
    def cpu_kernels(self) -> bool:
        """Whether to use the forms tuned on XLA:CPU profiles (CPU_KERNELS): weight_einsum's
        and add_bias's custom gradients, _capped_softmax, rotary's identity matmul. Their custom
        VJPs rule out forward-mode autodiff (jax.jvp, jax.linearize), and nothing shows they help
        on TPU or GPU, where weight_einsum's merged batch axes may also cross a sharded one; so
        `auto` keeps them to CPU."""
        kernels = self.cfg.cpu_kernels
        return jax.default_backend() == "cpu" if kernels == "auto" else kernels == "on"

    def add_bias(self, y, b):
        return add_bias(y, b) if self.cpu_kernels else y + b

    def constrain(self, x, names=ACT_AXES):
        if self.mesh is None:
            return x
        return jax.lax.with_sharding_constraint(
            x, sharding.logical_sharding(names, x.shape, self.mesh, self.rules)
        )

    def norm(self, name: str):
        return LayerNorm(self.cfg, name=name)

    def weight(self, name: str, shape: tuple, names: tuple, fans: tuple):
        """A weight matrix initialized as praxis would: `fans` are the (fan_in, fan_out) praxis
        computes for its own shape of this weight (base_layer.get_fan_in_fan_out)."""
        c = self.cfg
        if c.weight_init == "xavier":
            init = xavier(*fans, c.weight_init_scale)
        else:
            init = nn.initializers.normal(stddev=c.weight_init_scale)
        return self.param(name, _boxed(init, names), shape, jnp.dtype(c.param_dtype)).astype(
            self.dtype
        )

    def bias(self, name: str, shape: tuple, names: tuple):
        """A bias (praxis: constant 0 at init)."""
        b = self.param(
            name, _boxed(nn.initializers.zeros, names), shape, jnp.dtype(self.cfg.param_dtype)
        )
        return b.astype(self.dtype)

    def project(self, eqn: str, x, w, name: str):
        """A weight matmul; FP8 (pax.models.fp8) with USE_FP8, its scales under `name`_fp8."""
        if self.cfg.use_fp8:
            return fp8.einsum(f"{name}_fp8", eqn, x, w)
        return weight_einsum(eqn, x, w) if self.cpu_kernels else jnp.einsum(eqn, x, w)


class LayerNorm(nn.Module):
    """praxis LayerNorm: (x - mean) / sqrt(var + eps) * (1 + scale) + bias, the scale stored as
    its offset from 1 (initialized to 0). Statistics in float32, whatever the activations' dtype."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self, x):
        c = self.cfg
        dims, dtype = x.shape[-1], jnp.dtype(c.param_dtype)
        scale = self.param("scale", _boxed(nn.initializers.zeros, ("embed",)), (dims,), dtype)
        bias = self.param("bias", _boxed(nn.initializers.zeros, ("embed",)), (dims,), dtype)
        y = x.astype(jnp.float32)
        mean = jnp.mean(y, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(y - mean), axis=-1, keepdims=True)
        y = (y - mean) * jax.lax.rsqrt(var + c.layernorm_epsilon)
        return (y * (1.0 + scale) + bias).astype(x.dtype)


def _attend(
    q,
    k,
    v,
    q_positions,
    k_positions,
    q_segments,
    k_segments,
    cap: float,
    dtype,
    kv="bsnd",
    capped_softmax: bool = True,
):
    """Causal softmax attention of q (batch, t, group, kv_heads, dims) over k, v (batch, s,
    kv_heads, dims), or with kv="bnsd" (batch, kv_heads, s, dims), the KV cache's layout; with
    segment ids (packed inputs), only within a query's own segment. capped_softmax: the
    softmax of capped logits without its max pass (a CPU kernel, _capped_softmax)."""
    b, t, g, n, d = q.shape
    # A group's query heads share one key/value head, so the group folds into the query axis
    # (row t*g + j is query t of head j) and the scores are 4-D, (batch, kv_heads, t*g, s): the
    # order dot_general yields, so XLA never transposes them, the layer's largest tensors (the
    # 5-D "bngts" layout made XLA:CPU transpose them 20 times per bench step).
    q = q.reshape(b, t * g, n, d)
    logits = jnp.einsum(f"bqnd,{kv}->bnqs", q, k).astype(jnp.float32)
    mask = jnp.repeat(q_positions, g, axis=1)[:, None, :, None] >= k_positions[:, None, None, :]
    if q_segments is not None:
        q_segments = jnp.repeat(q_segments, g, axis=1)
        mask &= q_segments[:, None, :, None] == k_segments[:, None, None, :]
    if capped_softmax and 0 < cap <= _CAP_WITHOUT_MAX:
        probs = _capped_softmax(logits, mask, cap)
    else:
        logits = jnp.where(mask, _cap(logits, cap), jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(logits, axis=-1)
    probs = probs.astype(dtype)
    return jnp.einsum(f"bnqs,{kv}->bqnd", probs, v).reshape(b, t, g, n, d)


class Attention(_Sharded):
    @nn.compact
    def __call__(self, x, positions, segment_ids=None):
        """segment_ids (batch, length), packed inputs: tokens attend within their own segment."""
        c = self.cfg
        kv_heads, dims = c.num_kv_heads, c.dims_per_head
        group = c.num_heads // kv_heads
        d = c.model_dims
        # praxis initializes a combined [3, D, N, H] weight with fans (3·D·N, 3·D·H), separate
        # [D, N, H] ones with (D·N, D·H); here the projection is one fused einsum either way.
        rows = 3 * d if c.combine_qkv else d
        # Fused QKV: per kv head, `group` query heads then one key and one value head.
        qkv = self.project(
            "bte,ecnd->btcnd",
            x,
            self.weight(
                "qkv",
                (d, group + 2, kv_heads, dims),
                ("embed", None, "heads", "kv"),
                (rows * c.num_heads, rows * dims),
            ),
            "qkv",
        )
        if c.use_bias:
            qkv = self.add_bias(
                qkv, self.bias("qkv_bias", (group + 2, kv_heads, dims), (None, "heads", "kv"))
            )
        qkv = checkpoint_name(qkv, "combined_qkv_proj")
        # jnp.split, not indexing: its gradient is one concatenate, where three slices' are three
        # zero-padded copies of the whole projection summed.
        q, k, v = jnp.split(qkv, (group, group + 1), axis=2)
        k, v = k.squeeze(2), v.squeeze(2)
        if c.use_rotary_position_emb:
            q, k = (_rotary(a, positions, table_matmul=self.cpu_kernels) for a in (q, k))
        k_positions, k_segments, kv_layout = positions, segment_ids, "bsnd"
        if kv_cache.decoding(self):
            # Keys and values of the tokens fed before come from the cache; this call's join them.
            segment_ids = kv_cache.default_segments(positions, segment_ids)
            k, v, k_positions, k_segments = kv_cache.extend(self, k, v, positions, segment_ids)
            kv_layout = "bnsd"
        if c.per_dim_scale:
            # praxis PerDimScale: a learned per-dimension factor, 1/sqrt(dims) at init.
            scale = self.param(
                "per_dim_scale",
                _boxed(nn.initializers.zeros, ("kv",)),
                (dims,),
                jnp.dtype(c.param_dtype),
            )
            q = q * (R_SOFTPLUS_0 / math.sqrt(dims) * jax.nn.softplus(scale)).astype(q.dtype)
        else:
            # praxis without PerDimScale scales by hidden_dim // num_heads, hidden_dim = D.
            q = q * (d // c.num_heads) ** -0.5
        queries = (q, positions, segment_ids)

        def attend(chunk):
            q_chunk, q_positions, q_segments = chunk
            return _attend(
                q_chunk,
                k,
                v,
                q_positions,
                k_positions,
                q_segments,
                k_segments,
                c.atten_logit_cap,
                self.dtype,
                kv_layout,
                self.cpu_kernels,
            )

        size = c.attention_query_chunk
        if size and size < x.shape[1] and not kv_cache.decoding(self):
            # Memory-efficient attention: query chunks one at a time, each recomputed in the backward
            # pass, so only a chunk's (heads, chunk, length) scores are ever alive.
            def split(a):
                return a.reshape((a.shape[0], -1, size) + a.shape[2:]).swapaxes(0, 1)

            out = jax.lax.map(jax.checkpoint(attend), jax.tree.map(split, queries))
            out = out.swapaxes(0, 1).reshape(q.shape)
        else:
            out = attend(queries)
        out = checkpoint_name(out, "context")
        out = self.project(
            "btgnd,gnde->bte",
            out,
            self.weight(
                "post",
                (group, kv_heads, dims, d),
                (None, "heads", "kv", "embed"),
                (d * c.num_heads, d * dims),  # praxis's post weight is [D, N, H]
            ),
            "post",
        )
        if c.use_bias:
            out = self.add_bias(out, self.bias("post_bias", (d,), ("embed",)))
        return checkpoint_name(out, "out_proj")


class FeedForward(_Sharded):
    @nn.compact
    def __call__(self, x):
        c = self.cfg
        d, f = c.model_dims, c.hidden_dims
        act = ACTIVATIONS[c.activation]
        if c.activation in GATED:
            # praxis's gate is a second [D, F] layer: act(x W_gate + b_gate) * (x W_1 + b_1).
            h = self.project(
                "bte,egh->btgh",
                x,
                self.weight("wi", (d, 2, f), ("embed", None, "mlp"), (d, f)),
                "wi",
            )
            if c.ffn_has_bias:
                h = self.add_bias(h, self.bias("wi_bias", (2, f), (None, "mlp")))
            h = act(h[:, :, 0]) * h[:, :, 1]
        else:
            h = self.project(
                "bte,eh->bth", x, self.weight("wi", (d, f), ("embed", "mlp"), (d, f)), "wi"
            )
            if c.ffn_has_bias:
                h = self.add_bias(h, self.bias("wi_bias", (f,), ("mlp",)))
            h = act(h)
        h = self.constrain(h, ("batch", "length", "act_mlp"))
        out = self.project(
            "bth,he->bte", h, self.weight("wo", (f, d), ("mlp", "embed"), (f, d)), "wo"
        )
        if c.ffn_has_bias:
            out = self.add_bias(out, self.bias("wo_bias", (d,), ("embed",)))
        return out


class Block(_Sharded):
    """One pre-LN layer; (carry, positions, segment_ids) -> (carry, None) for nn.scan."""

    @nn.compact
    def __call__(self, x, positions, segment_ids=None):
        kw = dict(cfg=self.cfg, mesh=self.mesh, rules=self.rules)
        x = x + Attention(**kw, name="attention")(
            self.norm("pre_attention_norm")(x), positions, segment_ids
        )
        x = x + FeedForward(**kw, name="ffn")(self.norm("pre_ffn_norm")(x))
        return self.constrain(x), None


def stack_layers(kw: dict, num_layers: int, x, positions, segment_ids=None):
    """Adds `num_layers` Blocks to the calling (compact) module and runs x through them."""
    cfg = kw["cfg"]
    block = Block
    if cfg.remat_policy != "none":
        block = nn.remat(
            Block, policy=REMAT_POLICIES[cfg.remat_policy], prevent_cse=not cfg.use_repeated_layer
        )
    if cfg.use_repeated_layer:
        stack = nn.scan(
            block,
            # Each layer keeps its own slice of every per-layer collection: parameters, FP8
            # state, and while decoding its key/value cache.
            variable_axes={c: 0 for c in (*fp8.LAYER_COLLECTIONS, kv_cache.COLLECTION)},
            split_rngs={"params": True},
            in_axes=(nn.broadcast, nn.broadcast),
            length=num_layers,
            unroll=min(cfg.layer_scan_unroll, num_layers),
            metadata_params={nn.PARTITION_NAME: "layers"},
        )
        x, _ = stack(**kw, name="layers")(x, positions, segment_ids)
    else:
        for i in range(num_layers):
            x, _ = block(**kw, name=f"layer_{i}")(x, positions, segment_ids)
    return x


class LayerStack(_Sharded):
    """A run of layers as a module of its own: one pipeline stage."""

    num_layers: int = 1

    @nn.compact
    def __call__(self, x, positions, segment_ids=None):
        return stack_layers(
            dict(cfg=self.cfg, mesh=self.mesh, rules=self.rules),
            self.num_layers,
            x,
            positions,
            segment_ids,
        )


class TransformerLm(_Sharded):
    """num_stages > 1 splits the layers evenly into pipeline stages (pax.parallel.pipeline)."""

    num_stages: int = 1
    num_microbatches: int = 1

    @nn.compact
    def __call__(
        self, inputs, positions: Optional[jax.Array] = None, segment_ids: Optional[jax.Array] = None
    ):
        """Logits (batch, length, vocab) in float32 for int token ids (batch, length); with
        VOCAB_PAD_MULTIPLE, vocab is padded_vocab and the padded ids' logits PADDING_LOGIT."""
        c = self.cfg
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(inputs.shape[1]), inputs.shape)
        d, pdtype = c.model_dims, jnp.dtype(c.param_dtype)
        embedding_init = _boxed(
            nn.initializers.normal(stddev=c.embedding_init_std), ("vocab", "embed")
        )
        vocab = padded_vocab(c)
        if c.separate_embedding:
            # praxis Embedding: the model's default initializer over [vocab, D].
            table = self.weight("embedding", (vocab, d), ("vocab", "embed"), (c.vocab_size, d))
        else:
            table = self.param("embedding", embedding_init, (vocab, d), pdtype)
        x = jnp.take(table, inputs, axis=0).astype(self.dtype)
        if c.scale_sqrt_depth:
            x = x * d**0.5
        if c.position_embedding == "sinusoidal":
            x = x + sinusoids(positions, d).astype(self.dtype)
        elif c.position_embedding == "learned":
            rows = c.trainable_pe_max_seq_len
            x = x + jnp.take(
                self.weight("position_embedding", (rows, d), (None, "embed"), (rows, d)),
                positions,
                axis=0,
            )
        x = self.constrain(x)

        kw = dict(cfg=c, mesh=self.mesh, rules=self.rules)
        if self.num_stages > 1:
            x = pipeline.Pipeline(
                LayerStack,
                dict(num_layers=c.num_layers // self.num_stages, **kw),
                self.num_stages,
                self.num_microbatches,
                collections=fp8.LAYER_COLLECTIONS,
                mesh=self.mesh,
                rules=self.rules,
                name="pipeline",
            )(x, positions, segment_ids)
        else:
            x = stack_layers(kw, c.num_layers, x, positions, segment_ids)

        x = self.norm("final_norm")(x)
        if c.separate_embedding:
            # praxis FullSoftmax: its own [D, vocab] weight, Pax's softmax_init.
            gaussian = nn.initializers.normal(stddev=c.embedding_init_std)
            softmax = self.param(
                "softmax", _boxed(gaussian, ("embed", "vocab")), (d, vocab), pdtype
            ).astype(self.dtype)
            logits = jnp.einsum("bte,ev->btv", x, softmax)
        else:
            logits = jnp.einsum("bte,ve->btv", x, table.astype(self.dtype))
        if c.softmax_has_bias:
            logits = logits + self.bias("softmax_bias", (vocab,), ("vocab",))
        logits = self.constrain(logits, ("batch", "length", "act_vocab"))
        logits = _cap(logits.astype(jnp.float32), c.softmax_cap)
        if vocab > c.vocab_size:
            # Padding ids (VOCAB_PAD_MULTIPLE) get no probability: no loss, gradient or sample.
            logits = jnp.where(jnp.arange(vocab) < c.vocab_size, logits, PADDING_LOGIT)
        return logits


def padded_vocab(cfg: ModelConfig) -> int:
    """The tables' rows: VOCAB_SIZE rounded up to a multiple of VOCAB_PAD_MULTIPLE."""
    return -(-cfg.vocab_size // cfg.vocab_pad_multiple) * cfg.vocab_pad_multiple


def padding_params(cfg: ModelConfig) -> int:
    """How many stored numbers the vocabulary padding adds: rows of each table and the bias."""
    pad = padded_vocab(cfg) - cfg.vocab_size
    tables = 2 if cfg.separate_embedding else 1
    return pad * (tables * cfg.model_dims + (1 if cfg.softmax_has_bias else 0))


def lm_loss(logits, targets, weights):
    """Weighted token cross-entropy and Pax's LM metrics.

    Returns (loss, metrics) where loss = log_pplx = the weighted mean negative log-likelihood,
    accuracy = weighted next-token accuracy, num_tokens = sum of weights.
    """
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    weights = weights.astype(jnp.float32)
    num_tokens = weights.sum()
    denom = jnp.maximum(num_tokens, 1.0)
    loss = (nll * weights).sum() / denom
    correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
    metrics = {
        "loss": loss,
        "log_pplx": loss,
        "accuracy": (correct * weights).sum() / denom,
        "num_tokens": num_tokens,
    }
    return loss, metrics
