"""pax.optim.finite against optax.apply_if_finite, the rule it reimplements without a branch:
the same updates, state and counters step by step, through NaN and Inf gradients and past the
consecutive-error limit."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from pax.optim.finite import skip_if_not_finite

PARAMS = {"w": jnp.arange(6.0).reshape(2, 3) / 7, "b": jnp.ones((3,))}


def _grads(kind: str):
    g = jax.tree.map(lambda p: jnp.cos(p) + 0.5, PARAMS)
    if kind == "nan":
        g["w"] = g["w"].at[1, 2].set(jnp.nan)
    elif kind == "inf":
        g["b"] = g["b"].at[0].set(-jnp.inf)
    return g


@pytest.mark.parametrize("limit", [1_000_000, 1])
def test_the_same_updates_state_and_counters_as_optax_apply_if_finite(limit):
    inner = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2, weight_decay=1e-2))
    ours, theirs = skip_if_not_finite(inner, limit), optax.apply_if_finite(inner, limit)
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
