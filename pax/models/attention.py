"""Attention: praxis's DotProductAttention (attentions.py) and Pax's soft logit cap."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from pax.models import kernels, kv_cache, splash
from pax.models.base import Sharded, boxed
from pax.models.positions import rotary

# 1 / softplus(0): praxis PerDimScale's constant, so a zero-initialized scale is 1/sqrt(dims).
R_SOFTPLUS_0 = 1.442695041


def soft_cap(logits, cap: float):
    """Pax's soft cap: cap * tanh(logits / cap); keeps logits in (-cap, cap)."""
    return cap * jnp.tanh(logits / cap) if cap > 0 else logits


def attend(
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
    softmax of capped logits without its max pass (kernels.capped_softmax)."""
    b, t, g, n, d = q.shape
    # A group's query heads share one key/value head, so the group folds into the query axis
    # (row t*g + j is query t of head j) and the scores are 4-D, (batch, kv_heads, t*g, s): the
    # order dot_general yields, so XLA never transposes them, the layer's largest tensors (a
    # 5-D "bngts" layout makes XLA:CPU transpose them).
    q = q.reshape(b, t * g, n, d)
    logits = jnp.einsum(f"bqnd,{kv}->bnqs", q, k).astype(jnp.float32)
    mask = jnp.repeat(q_positions, g, axis=1)[:, None, :, None] >= k_positions[:, None, None, :]
    if q_segments is not None:
        q_segments = jnp.repeat(q_segments, g, axis=1)
        mask &= q_segments[:, None, :, None] == k_segments[:, None, None, :]
    if capped_softmax and 0 < cap <= kernels.CAP_WITHOUT_MAX:
        probs = kernels.capped_softmax(logits, mask, cap)
    else:
        logits = jnp.where(mask, soft_cap(logits, cap), jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(logits, axis=-1)
    probs = probs.astype(dtype)
    return jnp.einsum(f"bnqs,{kv}->bqnd", probs, v).reshape(b, t, g, n, d)


class Attention(Sharded):
    """praxis DotProductAttention: fused QKV projection, optional biases, queries scaled by
    PerDimScale (or 1/sqrt(D / heads)), capped logits, causal and segment masks, output
    projection; grouped key/value heads (NUM_KV_HEADS); the KV cache while decoding."""

    @nn.compact
    def __call__(self, x, positions, segment_ids=None):
        """segment_ids (batch, length), packed inputs: tokens attend within their own segment."""
        q, k, v = self._qkv(x, positions)
        k_positions, k_segments, kv_layout = positions, segment_ids, "bsnd"
        if kv_cache.decoding(self):
            # Keys and values of the tokens fed before come from the cache; this call's join them.
            segment_ids = kv_cache.default_segments(positions, segment_ids)
            k, v, k_positions, k_segments = kv_cache.extend(self, k, v, positions, segment_ids)
            kv_layout = "bnsd"
        q = self._scaled(q)
        keys = (k, v, k_positions, k_segments, kv_layout)
        out = checkpoint_name(self._context(q, positions, segment_ids, keys), "context")
        return self._output(out)

    def _qkv(self, x, positions):
        """Queries (batch, t, group, kv_heads, dims), keys and values (batch, t, kv_heads,
        dims) of the tokens in `x`, rotated by their positions where the model says."""
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
            q, k = (rotary(a, positions, table_matmul=self.cpu_kernels) for a in (q, k))
        return q, k, v

    def _scaled(self, q):
        c = self.cfg
        if c.per_dim_scale:
            # praxis PerDimScale: a learned per-dimension factor, 1/sqrt(dims) at init.
            dims = c.dims_per_head
            scale = self.param(
                "per_dim_scale",
                boxed(nn.initializers.zeros, ("kv",)),
                (dims,),
                jnp.dtype(c.param_dtype),
            )
            return q * (R_SOFTPLUS_0 / math.sqrt(dims) * jax.nn.softplus(scale)).astype(q.dtype)
        # praxis without PerDimScale scales by hidden_dim // num_heads, hidden_dim = D.
        return q * (c.model_dims // c.num_heads) ** -0.5

    def _context(self, q, positions, segment_ids, keys):
        """Each query's attention over `keys` (k, v, their positions and segments, layout):
        the splash kernel, query chunks one at a time, or all queries at once."""
        c = self.cfg
        k, v, k_positions, k_segments, kv_layout = keys
        queries = (q, positions, segment_ids)

        def attend_chunk(chunk):
            q_chunk, q_positions, q_segments = chunk
            return attend(
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
                self.capped_softmax,
            )

        size = c.attention_query_chunk
        if self.splash_attention and splash.usable(q.shape[1]) and not kv_cache.decoding(self):
            return splash.attend(q, k, v, segment_ids, c.atten_logit_cap, self.mesh, self.rules)
        if size and size < q.shape[1] and not kv_cache.decoding(self):
            # Memory-efficient attention: query chunks one at a time, each recomputed in the backward
            # pass, so only a chunk's (heads, chunk, length) scores are ever alive.
            def split(a):
                return a.reshape((a.shape[0], -1, size) + a.shape[2:]).swapaxes(0, 1)

            out = jax.lax.map(jax.checkpoint(attend_chunk), jax.tree.map(split, queries))
            return out.swapaxes(0, 1).reshape(q.shape)
        return attend_chunk(queries)

    def _output(self, out):
        """The output projection of the heads' context (batch, t, group, kv_heads, dims)."""
        c = self.cfg
        kv_heads, dims = c.num_kv_heads, c.dims_per_head
        group = c.num_heads // kv_heads
        d = c.model_dims
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
