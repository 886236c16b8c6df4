"""Position encodings: praxis's PositionalEmbedding (sinusoids added to the embeddings) and
RotaryPositionalEmbedding (queries and keys rotated by their positions). The learned table
(TrainablePositionalEmbedding) is a weight of the LM (pax.models.transformer)."""

import math

import jax.numpy as jnp

from pax.models import kernels


def sinusoids(positions, dims: int, min_timescale: float = 1.0, max_timescale: float = 1e4):
    """praxis PositionalEmbedding: [sin | cos] of positions over geometric timescales."""
    num_timescales = dims // 2
    increment = math.log(max_timescale / min_timescale) / max(num_timescales - 1, 1)
    inv_timescales = min_timescale * jnp.exp(jnp.arange(num_timescales) * -increment)
    scaled = positions[..., None].astype(jnp.float32) * inv_timescales
    signal = jnp.concatenate([jnp.sin(scaled), jnp.cos(scaled)], axis=-1)
    return jnp.pad(signal, [(0, 0)] * (signal.ndim - 1) + [(0, dims % 2)])


def rotary(x, positions, max_wavelength: float = 10_000.0, table_matmul: bool = True):
    """Rotary position embedding over the last axis; x is (batch, length, ..., dims).
    table_matmul: sin and cos through an identity matmul (kernels.sin_cos_table)."""
    half = x.shape[-1] // 2
    freq = max_wavelength ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = positions[..., None].astype(jnp.float32) * freq  # (batch, length, half)
    shape = angle.shape[:2] + (1,) * (x.ndim - 3) + (half,)
    if table_matmul:
        sin, cos = (a.reshape(shape) for a in kernels.sin_cos_table(angle))
    else:
        sin, cos = jnp.sin(angle).reshape(shape), jnp.cos(angle).reshape(shape)
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)
