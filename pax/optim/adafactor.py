"""Adafactor as praxis builds it for Pax's Transformer LMs (praxis ShardedAdafactor with
paxml's set_default_adafactor: decay_method='adam', beta1 0.9, decay_adam 0.99,
clip_threshold 1.0, factored, decoupled weight decay scaled by the learning rate).

Per parameter and step t (0-based), following praxis's _ShardedAdafactorHelper:
  g2      = g² + 1e-30
  decay   = β2 (1 - β2^t) / (1 - β2^(t+1))                    Adam's bias correction folded in
  matrix (rank >= 2, factored over its last two axes):
    vr    = decay vr + (1 - decay) mean(g2, axis=-1)
    vc    = decay vc + (1 - decay) mean(g2, axis=-2)
    x     = g / sqrt(vr / mean(vr, -1))[..., :, None] / sqrt(vc)[..., None, :]
  vector:
    v     = decay v + (1 - decay) g2;   x = g / sqrt(v)
  x      /= max(1, rms(x) / clip_threshold)
  u       = β1 u + (1 - β1) lr_t x                            momentum on the scaled update
  update  = -(u + weight_decay lr_t w)

optax has the pieces after the second moment (clip_by_block_rms, scale_by_learning_rate, ema,
scale), and they are used below. Its own scale_by_factored_rms cannot stand in for the first
one: its decay is 1 - (t+1)^-0.8 rather than Adam's bias-corrected β2, and it factors the two
largest axes (only if both are >= 128) where praxis always factors the last two. Momentum stays
float32 here; praxis stores it as int8 by default (quantized_dtype), which saves memory and
changes the numbers slightly.

A stacked leaf [layers, ...] is that many parameters (pax.optim.per_layer): the rank test, the
factoring and the update clipping see one layer at a time, so a stacked norm scale [layers, D]
keeps an unfactored second moment like an unstacked one.

The factored statistics keep the reduced axis with size 1 (v_row: shape[:-1] + (1,), v_col:
shape[:-2] + (1,) + shape[-1:]), so every statistic has its parameter's rank and each of its axes
either is the parameter's or has size 1: pax.train.state shards it along the parameter's
matching axes, as praxis's ShardedAdafactor.init_partition_spec does with the parameter's
split_dims_mapping minus the reduced axis.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from pax.optim import per_layer

EPSILON1 = 1e-30  # praxis ShardedAdafactor.epsilon1_grad_sq_reg


class FactoredState(NamedTuple):
    """Per parameter of shape prefix + s (prefix: its stacked layers); unused ones are
    placeholders of shape prefix + (1,) * len(s)."""

    count: jax.Array
    v_row: optax.Params  # len(s) >= 2: prefix + s[:-1] + (1,)
    v_col: optax.Params  # len(s) >= 2: prefix + s[:-2] + (1,) + s[-1:]
    v: optax.Params  # len(s) < 2: the parameter's shape


def _shaped(p) -> bool:
    # optax.tree_map_params initializes with a placeholder in place of the parameter tree to find
    # which parts of the state are parameter-shaped; pass it through untouched.
    return hasattr(p, "shape")


def _zeros(shape):
    return jnp.zeros(shape, jnp.float32)


def _factored(shape, k: int) -> bool:
    return len(shape) - k >= 2


def _state_shapes(shape, k: int):
    """(v_row, v_col, v) shapes for a parameter of `shape` with k stacked dimensions."""
    ones = shape[:k] + (1,) * (len(shape) - k)
    if _factored(shape, k):
        return shape[:-1] + (1,), shape[:-2] + (1,) + shape[-1:], ones
    return ones, ones, shape


def scale_by_factored_rms(decay_adam: float, prefix=None) -> optax.GradientTransformation:
    """g / sqrt(second moment), the second moment factored for matrices (see module doc).
    prefix: each leaf's number of stacked dimensions (pax.optim.per_layer)."""

    def init(params):
        ks = per_layer.prefixes(params, prefix)

        def each(i):
            def make(p, k):
                return _zeros(_state_shapes(p.shape, k)[i]) if _shaped(p) else p

            return jax.tree.map(make, params, ks)

        return FactoredState(
            count=jnp.zeros([], jnp.int32), v_row=each(0), v_col=each(1), v=each(2)
        )

    def update(updates, state, params=None):
        del params
        t = state.count.astype(jnp.float32)
        decay = decay_adam * (1.0 - decay_adam**t) / (1.0 - decay_adam ** (t + 1.0))

        def one_layer(g, vr, vc, v):
            g = g.astype(jnp.float32)
            g2 = jnp.square(g) + EPSILON1
            if g.ndim >= 2:
                vr = decay * vr + (1.0 - decay) * jnp.mean(g2, axis=-1, keepdims=True)
                vc = decay * vc + (1.0 - decay) * jnp.mean(g2, axis=-2, keepdims=True)
                r_factor = jax.lax.rsqrt(vr / jnp.mean(vr, axis=-2, keepdims=True))
                x = g * r_factor * jax.lax.rsqrt(vc)
            else:
                v = decay * v + (1.0 - decay) * g2
                x = g * jax.lax.rsqrt(v)
            return x, vr, vc, v

        def one(g, vr, vc, v, k):
            return per_layer.vmap_prefix(one_layer, k)(g, vr, vc, v)

        ks = per_layer.prefixes(updates, prefix)
        out = jax.tree.map(one, updates, state.v_row, state.v_col, state.v, ks)
        pick = lambda i: jax.tree.map(lambda _, o: o[i], updates, out)  # noqa: E731
        new_state = FactoredState(state.count + 1, pick(1), pick(2), pick(3))
        return pick(0), new_state

    return optax.GradientTransformation(init, update)


def add_decayed_weights_scaled(
    weight_decay: float, schedule: optax.Schedule
) -> optax.GradientTransformation:
    """updates + weight_decay * lr_t * params: praxis's decoupled decay, which, unlike
    optax.add_decayed_weights placed after scale_by_learning_rate, follows the schedule."""

    def init(params):
        del params
        return optax.ScaleByScheduleState(count=jnp.zeros([], jnp.int32))

    def update(updates, state, params):
        rate = weight_decay * schedule(state.count)
        updates = jax.tree.map(lambda u, p: u + rate * p.astype(u.dtype), updates, params)
        return updates, optax.ScaleByScheduleState(count=optax.safe_increment(state.count))

    return optax.GradientTransformation(init, update)


def adafactor(
    schedule: optax.Schedule,
    *,
    beta1: float,
    decay_adam: float,
    clip_threshold: float,
    weight_decay: float,
    prefix=None,
) -> optax.GradientTransformation:
    """prefix: each leaf's number of stacked dimensions (pax.optim.per_layer)."""
    parts = [scale_by_factored_rms(decay_adam, prefix)]
    if clip_threshold > 0:
        parts.append(per_layer.clip_by_block_rms(clip_threshold, prefix))
    parts.append(optax.scale_by_learning_rate(schedule, flip_sign=False))
    if beta1:
        parts.append(optax.ema(beta1, debias=False))
    if weight_decay:
        parts.append(add_decayed_weights_scaled(weight_decay, schedule))
    parts.append(optax.scale(-1.0))
    return optax.chain(*parts)
