"""Bytes decoding needs, counted by hand from the model's config: its parameters, its KV cache,
its activations, and the least a forward step moves."""

import numpy as np

from pax.models.feed_forward import GATED


def _dims(cfg) -> tuple:
    """(model, hidden, heads, kv heads, dims per head, FFN input projections) of `cfg`."""
    ffn_in = 2 if cfg.activation in GATED else 1
    return (
        cfg.model_dims,
        cfg.hidden_dims,
        cfg.num_heads,
        cfg.num_kv_heads,
        cfg.dims_per_head,
        ffn_in,
    )


def parameter_bytes(cfg, dtype=None) -> int:
    """Bytes of the parameters one forward step reads: all of them, once (the embedding table
    is the softmax weight as well unless SEPARATE_EMBEDDING; a learned position table is read
    only at the step's positions, so it is left out), stored as `dtype` (default: the
    parameters' own)."""
    e, f, h, k, d, ffn_in = _dims(cfg)
    layer = e * (h + 2 * k) * d + h * d * e + e * f * ffn_in + f * e + 4 * e  # + 2 norms
    layer += (f * ffn_in + e) if cfg.ffn_has_bias else 0
    layer += ((h + 2 * k) * d + e) if cfg.use_bias else 0
    layer += d if cfg.per_dim_scale else 0
    once = cfg.vocab_size * e * (2 if cfg.separate_embedding else 1) + 2 * e  # + final norm
    once += cfg.vocab_size if cfg.softmax_has_bias else 0
    return (cfg.num_layers * layer + once) * np.dtype(dtype or cfg.param_dtype).itemsize


def cache_bytes(cfg, batch: int, length: int) -> int:
    """Bytes of a KV cache buffer of `length` slots (pax.models.kv_cache): every layer's keys
    and values (fprop dtype) and its own int32 slot positions and segment ids."""
    kv = 2 * batch * length * cfg.num_kv_heads * cfg.dims_per_head
    kv *= np.dtype(cfg.fprop_dtype).itemsize
    return cfg.num_layers * (kv + 2 * batch * length * 4)


def activation_bytes(cfg, batch: int, length: int, span: int, new: int) -> int:
    """What decoding's intermediates need at most: the prefill's (`length` tokens per row
    attending over `span` slots, the largest call) and the loop's state (`new` drawn tokens and
    one row of logits per row). Layers run one after another, and within a layer attention,
    then the FFN, then (after the last) the output logits: the bound is the largest of these
    stages' buffers, each counted with the residual stream and as if all live at once
    (attention: the residual's norm, fused QKV, scores and probabilities, its output; FFN:
    the norm, its input(s) and activation; output: the logits and their capped form)."""
    e, f, h, k, d, ffn_in = _dims(cfg)
    attention = 2 * e + (h + 2 * k) * d + 2 * h * span + h * d
    ffn = 2 * e + (ffn_in + 1) * f
    output = e + 2 * cfg.vocab_size
    prefill = batch * length * max(attention, ffn, output)
    prefill *= np.dtype(cfg.fprop_dtype).itemsize
    return prefill + batch * new * 4 + batch * cfg.vocab_size * 4


def read_dtype(cfg) -> np.dtype:
    """The dtype a step reads the weights in: the narrower of the parameters' and the
    activations'. Each weight is cast to the activations' dtype where it is used, and XLA
    hoists that cast of a loop-invariant weight out of the decode loop, so a bf16 step reads
    the bf16 copy (docs/benchmarks.md's decode table: on a v5e chip a step of the 0.55B bench
    model takes less time than reading its float32 parameters could)."""
    return min(np.dtype(cfg.param_dtype), np.dtype(cfg.fprop_dtype), key=lambda t: t.itemsize)


def step_bytes(cfg, batch: int, length: int, span: int = 0) -> int:
    """The least a forward step over `length` tokens per row moves: the parameters (as
    `read_dtype`), plus with a cache of `span` slots the whole buffer (read, or at the prefill
    filled), without one the keys and values of its own tokens, written once and read once."""
    weights = parameter_bytes(cfg, read_dtype(cfg))
    if span:
        return weights + cache_bytes(cfg, batch, span)
    kv = 2 * cfg.num_layers * batch * length * cfg.num_kv_heads * cfg.dims_per_head
    return weights + 2 * kv * np.dtype(cfg.fprop_dtype).itemsize
