"""pax.optim.finite against optax.apply_if_finite, the rule it reimplements without a branch:
the same updates, state and counters step by step, through NaN and Inf gradients and past the
consecutive-error limit; with optax's Adam, and with pax.optim.adam's in Pax's Adam chain."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from pax.optim import adam
from pax.optim.finite import skip_if_not_finite

PARAMS = {"w": jnp.arange(6.0).reshape(2, 3) / 7, "b": jnp.ones((3,))}


def _grads(kind: str):
    g = jax.tree.map(lambda p: jnp.cos(p) + 0.5, PARAMS)
    if kind == "nan":
        g["w"] = g["w"].at[1, 2].set(jnp.nan)
    elif kind == "inf":
        g["b"] = g["b"].at[0].set(-jnp.inf)
    return g


def _adamw(scale_by_adam):
    del scale_by_adam
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2, weight_decay=1e-2))


def _pax_adam(scale_by_adam):
    """pax.optim.optimizers' Adam chain: clip, Adam, per-tensor capping, decay, rate."""
    return optax.chain(
        optax.clip_by_global_norm(1.0),
        scale_by_adam(b1=0.9, b2=0.99, eps=1e-6, eps_root=0.0),
        optax.clip_by_block_rms(0.1),
        optax.add_decayed_weights(1e-2),
        optax.scale_by_learning_rate(1e-2),
    )


@pytest.mark.parametrize("limit", [1_000_000, 1])
@pytest.mark.parametrize("chain", [_adamw, _pax_adam])
def test_the_same_updates_state_and_counters_as_optax_apply_if_finite(chain, limit):
    ours = skip_if_not_finite(chain(adam.scale_by_adam), limit)
    theirs = optax.apply_if_finite(chain(optax.scale_by_adam), limit)
    p_ours = p_theirs = PARAMS
    s_ours, s_theirs = ours.init(PARAMS), theirs.init(PARAMS)
    assert jax.tree.structure(s_ours) == jax.tree.structure(s_theirs)
    # With limit 1, the second of two non-finite steps in a row is applied, as optax does.
    for kind in ("finite", "nan", "finite", "inf", "nan", "finite"):
        g = _grads(kind)
        u_ours, s_ours = jax.jit(ours.update)(g, s_ours, p_ours)
        u_theirs, s_theirs = jax.jit(theirs.update)(g, s_theirs, p_theirs)
        for a, b in zip(jax.tree.leaves((u_ours, s_ours)), jax.tree.leaves((u_theirs, s_theirs))):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=kind)
        p_ours = optax.apply_updates(p_ours, u_ours)
        p_theirs = optax.apply_updates(p_theirs, u_theirs)
    assert int(s_ours.total_notfinite) == 3
    finite_params = all(bool(jnp.all(jnp.isfinite(p))) for p in jax.tree.leaves(p_ours))
    assert finite_params == (limit > 1)


def test_the_step_has_no_conditional():
    """The point of it: XLA sees selects it can fuse, not a branch it cannot."""

    def ops(tx) -> set:
        hlo = jax.jit(tx.update).lower(_grads("finite"), tx.init(PARAMS), PARAMS).as_text()
        return set(re.findall(r"stablehlo\.(\w+)", hlo))

    branches = {"case", "if"}  # what lax.cond lowers to
    assert not ops(skip_if_not_finite(optax.adam(1e-3), 10)) & branches
    assert ops(optax.apply_if_finite(optax.adam(1e-3), 10)) & branches


def test_a_squared_norm_past_float32_is_not_finite_as_the_step_says():
    """Finite gradients whose squared global norm overflows: the step's `finite` metric
    (isfinite of the norm) calls them not finite, and the guard skips them alike; this is where
    it parts from apply_if_finite, which applies them."""
    g = jax.tree.map(lambda p: jnp.full_like(p, 3e19), PARAMS)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(g))
    assert not jnp.isfinite(optax.tree.norm(g))
    tx = skip_if_not_finite(_pax_adam(adam.scale_by_adam), 10)
    state = tx.init(PARAMS)
    updates, new_state = jax.jit(tx.update)(g, state, PARAMS)
    assert all(not np.any(np.asarray(u)) for u in jax.tree.leaves(updates))
    assert int(new_state.total_notfinite) == 1 and not bool(new_state.last_finite)
    for a, b in zip(jax.tree.leaves(new_state.inner_state), jax.tree.leaves(state.inner_state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_adam_alone_is_optax_adam():
    """Outside the guard (`accepted` not given) it is optax.scale_by_adam, bit for bit."""
    ours = adam.scale_by_adam(b1=0.9, b2=0.99, eps=1e-6, eps_root=1e-12)
    theirs = optax.scale_by_adam(b1=0.9, b2=0.99, eps=1e-6, eps_root=1e-12)
    s_ours, s_theirs = ours.init(PARAMS), theirs.init(PARAMS)
    for kind in ("finite", "finite", "finite"):
        g = _grads(kind)
        u_ours, s_ours = jax.jit(ours.update)(g, s_ours)
        u_theirs, s_theirs = jax.jit(theirs.update)(g, s_theirs)
        for a, b in zip(jax.tree.leaves((u_ours, s_ours)), jax.tree.leaves((u_theirs, s_theirs))):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
