"""Decoder-only Transformer LM (Flax linen), with Pax's defaults.

Pre-layer-norm blocks, fused QKV, causal attention with optional grouped-query heads, rotary or
learned positions, ReLU/GELU/gated FFN, Pax's logit caps, layers stacked with nn.scan and
rematerialized by a named policy. Every parameter carries logical axis names; which mesh axis
each name lands on is decided by pax.parallel.sharding, never here.
"""

from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from pax.experiments.config import ModelConfig
from pax.models import fp8, kv_cache
from pax.parallel import pipeline, sharding

REMAT_POLICIES = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "dots_with_no_batch_dims_saveable": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}
ACTIVATIONS = {"relu": nn.relu, "gelu": nn.gelu, "swiglu": nn.silu, "geglu": nn.gelu}
GATED = ("swiglu", "geglu")
ACT_AXES = ("batch", "length", "act_embed")


def _init(fan_in: int, names: tuple):
    return nn.with_logical_partitioning(nn.initializers.normal(stddev=fan_in**-0.5), names)


def _cap(logits, cap: float):
    """Pax's soft cap: cap * tanh(logits / cap); keeps logits in (-cap, cap)."""
    return cap * jnp.tanh(logits / cap) if cap > 0 else logits


def _rotary(x, positions, max_wavelength: float = 10_000.0):
    """Rotary position embedding over the last axis; x is (batch, length, ..., dims)."""
    half = x.shape[-1] // 2
    freq = max_wavelength ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = positions[..., None].astype(jnp.float32) * freq  # (batch, length, half)
    angle = angle.reshape(angle.shape[:2] + (1,) * (x.ndim - 3) + (half,))
    sin, cos = jnp.sin(angle), jnp.cos(angle)
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


class _Sharded(nn.Module):
    cfg: ModelConfig
    mesh: Any = None
    rules: tuple = sharding.LOGICAL_AXIS_RULES

    @property
    def dtype(self):
        return jnp.dtype(self.cfg.activation_dtype)

    def constrain(self, x, names=ACT_AXES):
        if self.mesh is None:
            return x
        return jax.lax.with_sharding_constraint(
            x, sharding.logical_sharding(names, x.shape, self.mesh, self.rules)
        )

    def norm(self, name: str):
        return nn.LayerNorm(
            epsilon=self.cfg.norm_epsilon,
            dtype=self.dtype,
            name=name,
            param_dtype=jnp.dtype(self.cfg.param_dtype),
            scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
        )

    def weight(self, name: str, shape: tuple, names: tuple, fan_in: int):
        w = self.param(name, _init(fan_in, names), shape, jnp.dtype(self.cfg.param_dtype))
        return w.astype(self.dtype)

    def project(self, eqn: str, x, w, name: str):
        """A weight matmul; FP8 (pax.models.fp8) with USE_FP8, its scales under `name`_fp8."""
        return fp8.einsum(f"{name}_fp8", eqn, x, w, self.cfg.use_fp8)


def _attend(q, k, v, q_positions, k_positions, q_segments, k_segments, cap: float, dtype):
    """Causal softmax attention of q (batch, t, group, kv_heads, dims) over k, v (batch, s, ...);
    with segment ids (packed inputs), only within a query's own segment."""
    b, t, g, n, d = q.shape
    # A group's query heads share one key/value head, so the group folds into the query axis
    # (row t*g + j is query t of head j) and the scores are 4-D, (batch, kv_heads, t*g, s): the
    # order dot_general yields, so XLA never transposes them, the layer's largest tensors (the
    # 5-D "bngts" layout made XLA:CPU transpose them 20 times per bench step).
    q = q.reshape(b, t * g, n, d)
    logits = _cap(jnp.einsum("bqnd,bsnd->bnqs", q, k).astype(jnp.float32), cap)
    mask = jnp.repeat(q_positions, g, axis=1)[:, None, :, None] >= k_positions[:, None, None, :]
    if q_segments is not None:
        q_segments = jnp.repeat(q_segments, g, axis=1)
        mask &= q_segments[:, None, :, None] == k_segments[:, None, None, :]
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, axis=-1).astype(dtype)
    return jnp.einsum("bnqs,bsnd->bqnd", probs, v).reshape(b, t, g, n, d)


class Attention(_Sharded):
    @nn.compact
    def __call__(self, x, positions, segment_ids=None):
        """segment_ids (batch, length), packed inputs: tokens attend within their own segment."""
        c = self.cfg
        kv_heads, dims = c.num_kv_heads, c.dims_per_head
        group = c.num_heads // kv_heads
        # Fused QKV: per kv head, `group` query heads then one key and one value head.
        qkv = self.project(
            "bte,ecnd->btcnd",
            x,
            self.weight(
                "qkv",
                (c.model_dims, group + 2, kv_heads, dims),
                ("embed", None, "heads", "kv"),
                c.model_dims,
            ),
            "qkv",
        )
        q, k, v = qkv[:, :, :group], qkv[:, :, group], qkv[:, :, group + 1]
        if c.position_embedding == "rotary":
            q, k = _rotary(q, positions), _rotary(k, positions)
        k_positions, k_segments = positions, segment_ids
        if kv_cache.decoding(self):
            # Keys and values of the tokens fed before come from the cache; this call's join them.
            segment_ids = kv_cache.default_segments(positions, segment_ids)
            k, v, k_positions, k_segments = kv_cache.extend(self, k, v, positions, segment_ids)
        queries = (q * dims**-0.5, positions, segment_ids)

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
        return self.project(
            "btgnd,gnde->bte",
            out,
            self.weight(
                "post",
                (group, kv_heads, dims, c.model_dims),
                (None, "heads", "kv", "embed"),
                c.num_heads * dims,
            ),
            "post",
        )


class FeedForward(_Sharded):
    @nn.compact
    def __call__(self, x):
        c = self.cfg
        act = ACTIVATIONS[c.activation]
        if c.activation in GATED:
            wi = self.weight(
                "wi", (c.model_dims, 2, c.hidden_dims), ("embed", None, "mlp"), c.model_dims
            )
            h = self.project("bte,egh->btgh", x, wi, "wi")
            h = act(h[:, :, 0]) * h[:, :, 1]
        else:
            h = act(
                self.project(
                    "bte,eh->bth",
                    x,
                    self.weight(
                        "wi", (c.model_dims, c.hidden_dims), ("embed", "mlp"), c.model_dims
                    ),
                    "wi",
                )
            )
        h = self.constrain(h, ("batch", "length", "act_mlp"))
        return self.project(
            "bth,he->bte",
            h,
            self.weight("wo", (c.hidden_dims, c.model_dims), ("mlp", "embed"), c.hidden_dims),
            "wo",
        )


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
        """Logits (batch, length, vocab) in float32 for int token ids (batch, length)."""
        c = self.cfg
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(inputs.shape[1]), inputs.shape)
        embedding = self.param(
            "embedding",
            _init(c.model_dims, ("vocab", "embed")),
            (c.vocab_size, c.model_dims),
            jnp.dtype(c.param_dtype),
        )
        # Pax scales looked-up embeddings by sqrt(dims) so inputs are unit-scale.
        x = jnp.take(embedding, inputs, axis=0).astype(self.dtype) * c.model_dims**0.5
        if c.position_embedding == "learned":
            x = x + jnp.take(
                self.weight(
                    "position_embedding", (c.max_seq_len, c.model_dims), (None, "embed"), 1
                ),
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
            softmax = self.weight(
                "softmax", (c.model_dims, c.vocab_size), ("embed", "vocab"), c.model_dims
            )
            logits = jnp.einsum("bte,ev->btv", x, softmax)
        else:
            logits = jnp.einsum("bte,ve->btv", x, embedding.astype(self.dtype))
        logits = self.constrain(logits, ("batch", "length", "act_vocab"))
        return _cap(logits.astype(jnp.float32), c.softmax_cap)


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
