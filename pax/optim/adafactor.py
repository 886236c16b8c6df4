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
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

EPSILON1 = 1e-30  # praxis ShardedAdafactor.epsilon1_grad_sq_reg


class FactoredState(NamedTuple):
    count: jax.Array
    v_row: optax.Params  # per parameter: rank >= 2: shape[:-1]; else a (1,) placeholder
    v_col: optax.Params  # rank >= 2: shape[:-2] + shape[-1:]; else (1,)
    v: optax.Params  # rank < 2: the parameter's shape; else (1,)


def _shaped(p) -> bool:
    # optax.tree_map_params initializes with a placeholder in place of the parameter tree to find
    # which parts of the state are parameter-shaped; pass it through untouched.
    return hasattr(p, "shape")


def _zeros(shape):
    return jnp.zeros(shape, jnp.float32)


def scale_by_factored_rms(decay_adam: float) -> optax.GradientTransformation:
    """g / sqrt(second moment), the second moment factored for matrices (see module doc)."""

    def init(params):
        def each(fn):
            return jax.tree.map(lambda p: fn(p.shape) if _shaped(p) else p, params)

        return FactoredState(
            count=jnp.zeros([], jnp.int32),
            v_row=each(lambda s: _zeros(s[:-1] if len(s) >= 2 else (1,))),
            v_col=each(lambda s: _zeros(s[:-2] + s[-1:] if len(s) >= 2 else (1,))),
            v=each(lambda s: _zeros((1,) if len(s) >= 2 else s)),
        )

    def update(updates, state, params=None):
        del params
        t = state.count.astype(jnp.float32)
        decay = decay_adam * (1.0 - decay_adam**t) / (1.0 - decay_adam ** (t + 1.0))

        def one(g, vr, vc, v):
            g = g.astype(jnp.float32)
            g2 = jnp.square(g) + EPSILON1
            if g.ndim >= 2:
                vr = decay * vr + (1.0 - decay) * jnp.mean(g2, axis=-1)
                vc = decay * vc + (1.0 - decay) * jnp.mean(g2, axis=-2)
                r_factor = jax.lax.rsqrt(vr / jnp.mean(vr, axis=-1, keepdims=True))
                x = g * r_factor[..., :, None] * jax.lax.rsqrt(vc)[..., None, :]
            else:
                v = decay * v + (1.0 - decay) * g2
                x = g * jax.lax.rsqrt(v)
            return x, vr, vc, v

        out = jax.tree.map(one, updates, state.v_row, state.v_col, state.v)
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
) -> optax.GradientTransformation:
    parts = [scale_by_factored_rms(decay_adam)]
    if clip_threshold > 0:
        parts.append(optax.clip_by_block_rms(clip_threshold))
    parts.append(optax.scale_by_learning_rate(schedule, flip_sign=False))
    if beta1:
        parts.append(optax.ema(beta1, debias=False))
    if weight_decay:
        parts.append(add_decayed_weights_scaled(weight_decay, schedule))
    parts.append(optax.scale(-1.0))
    return optax.chain(*parts)
