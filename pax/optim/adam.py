"""optax.scale_by_adam whose moments hold still on a step the finite guard rejects.

optax's Adam computes its direction m̂ / (sqrt(v̂ + eps_root) + eps) from the moments it has just
updated, and pax.optim.finite keeps the old moments on a rejected step. Under Pax's per-tensor
update capping that order costs a pass over the optimizer's state: the capping's RMS reduction
reads the gradient and both moments, and the last pass reads all of them again to choose
between old and new moments. Here the guard's verdict (the extra argument `accepted`) chooses
first and the direction comes from the chosen moments, so XLA writes the moments from the
reduction's own pass and the last pass reads only them and the parameter: one read of the
gradient and both moments fewer (the optimizer's rows of `python -m benchmarks.tpu_bench
--profile`).

On an accepted step the moments, count and direction are optax's own, bit for bit; on a
rejected one the direction is meaningless and the guard applies zero in its place.
"""

import jax
import jax.numpy as jnp
import optax


def scale_by_adam(b1: float, b2: float, eps: float, eps_root: float):
    inner = optax.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root)

    def update(updates, state, params=None, *, accepted=True, **extra_args):
        del extra_args
        _, new = inner.update(updates, state, params)
        # The same select the guard applies to the state returned here (`new`), so XLA computes
        # it once.
        kept = jax.tree.map(lambda n, o: jnp.where(accepted, n, o), new, state)
        mu_hat = optax.tree.bias_correction(kept.mu, b1, kept.count)
        nu_hat = optax.tree.bias_correction(kept.nu, b2, kept.count)
        direction = jax.tree.map(lambda m, v: m / (jnp.sqrt(v + eps_root) + eps), mu_hat, nu_hat)
        return direction, new

    return optax.GradientTransformationExtraArgs(inner.init, update)
