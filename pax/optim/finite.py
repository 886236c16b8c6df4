"""Skipping updates whose gradients are not finite, without a branch.

optax.apply_if_finite makes the same choice with lax.cond over the whole inner update. XLA
cannot fuse across a conditional: the update and the optimizer state are written out whole
inside the branch and read back by apply_updates after it, extra passes over every parameter
that `python -m benchmarks.tpu_bench --profile` shows on a TPU. Here the choice is a select per
element, which fuses into the passes that compute the update. The state is optax's own
ApplyIfFiniteState, so checkpoints and the counters the loop reads stay as they were.

A step counts as finite when the global norm of its gradients is: the rule of the step's own
`finite` metric, and one reduction XLA shares with the global-norm clip instead of a pass of its
own. It differs from apply_if_finite only where every gradient is finite and the squared norm
overflows float32 (a norm above 1.8e19). The verdict reaches the inner transformations as the
extra argument `accepted` (pax.optim.adam uses it).
"""

import jax
import jax.numpy as jnp
import optax


def skip_if_not_finite(
    inner: optax.GradientTransformation, max_consecutive_errors: int
) -> optax.GradientTransformation:
    """optax.apply_if_finite's semantics: a step whose gradients hold a NaN or an Inf leaves
    the inner state alone and updates by zero, until more than `max_consecutive_errors` such
    steps in a row make it give up and apply them."""
    inner = optax.with_extra_args_support(inner)

    def init(params):
        return optax.ApplyIfFiniteState(
            notfinite_count=jnp.zeros([], jnp.int32),
            last_finite=jnp.array(True, jnp.bool_),
            total_notfinite=jnp.zeros([], jnp.int32),
            inner_state=inner.init(params),
        )

    def update(updates, state, params=None, **extra_args):
        isfinite = jnp.isfinite(optax.tree.norm(updates))
        notfinite_count = jnp.where(
            isfinite, jnp.zeros([], jnp.int32), optax.safe_increment(state.notfinite_count)
        )
        accept = isfinite | (notfinite_count > max_consecutive_errors)
        new_updates, new_inner = inner.update(
            updates, state.inner_state, params, accepted=accept, **extra_args
        )
        chosen = jax.tree.map(
            lambda new, old: jnp.where(accept, new, old), new_inner, state.inner_state
        )
        return jax.tree.map(lambda u: jnp.where(accept, u, jnp.zeros_like(u)), new_updates), (
            optax.ApplyIfFiniteState(
                notfinite_count=notfinite_count,
                last_finite=isfinite,
                total_notfinite=jnp.where(
                    isfinite, state.total_notfinite, optax.safe_increment(state.total_notfinite)
                ),
                inner_state=chosen,
            )
        )

    return optax.GradientTransformationExtraArgs(init, update)
