"""Pure step functions: train_step(state, batch) -> (state, metrics) and eval_step.

The makers return the same function for the same model, optimizer and axis (and
pax.optim.optimizers.build returns the same optimizer for the same config), so a process traces a
step once however many runs jit it."""

import functools

import jax
import jax.numpy as jnp
import optax

from pax.models import fp8
from pax.models.transformer import lm_loss


def packing(batch) -> dict:
    """Packed batches (C4) carry each token's document and position in it; others do not."""
    return {k: batch.get(k) for k in ("positions", "segment_ids")}


@functools.lru_cache(maxsize=16)
def make_train_step(model, tx, lr_schedule, axis_name=None):
    """axis_name: under pmap, the device axis to average gradients and metrics over."""

    def train_step(state, batch):
        def loss_fn(params, owg):
            logits = model.apply(
                {"params": params, **fp8.for_differentiation(owg)},
                batch["inputs"],
                **packing(batch),
            )
            return lm_loss(logits, batch["targets"], batch["weights"])

        # FP8 scales and amax histories ({} without FP8): their "gradients" are their next values.
        owg = {c: state[c] for c in (fp8.OWG,) if c in state}
        (_, metrics), (grads, owg_next) = jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)(
            state["params"], owg
        )
        if axis_name:
            grads, metrics = _device_mean(grads, metrics, axis_name)
            owg_next = jax.lax.pmax(owg_next, axis_name)  # the largest amax seen on any device
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        grad_norm = optax.tree.norm(grads)
        finite = jnp.isfinite(metrics["loss"]) & jnp.isfinite(grad_norm)
        new_state = {
            "step": state["step"] + 1,
            "params": optax.apply_updates(state["params"], updates),
            "opt_state": opt_state,
            **fp8.overwrite(owg, owg_next, keep_old=~finite),
        }
        metrics = {
            **metrics,
            "grad_norm": grad_norm,
            # The rate this step applies: the optimizer's schedules count applied steps only
            # (pax.optim.finite leaves them alone on a skipped step).
            "learning_rate": lr_schedule(state["step"] - state["opt_state"].total_notfinite),
            "finite": finite,
            "skipped_steps": opt_state.total_notfinite,
        }  # from the optimizer's finite guard (pax.optim.finite)
        return new_state, metrics

    return train_step


@functools.lru_cache(maxsize=16)
def make_eval_step(model, axis_name=None):
    def eval_step(variables, batch):
        """variables: pax.train.state.model_variables(state)."""
        logits = model.apply(variables, batch["inputs"], **packing(batch))
        metrics = lm_loss(logits, batch["targets"], batch["weights"])[1]
        if axis_name:
            _, metrics = _device_mean({}, metrics, axis_name)
        return metrics

    return eval_step


def _device_mean(grads, metrics, axis_name):
    """Gradients and loss metrics over all devices of `axis_name`, each device weighted by its
    tokens: exactly the whole batch's token mean, which a plain pmean is only when every device
    holds as many tokens. Token counts are summed."""
    tokens = metrics["num_tokens"]
    total = jax.lax.psum(tokens, axis_name)
    mean = jax.tree.map(
        lambda a: jax.lax.psum(a * tokens, axis_name) / total,
        (grads, {k: v for k, v in metrics.items() if k != "num_tokens"}),
    )
    return mean[0], {**mean[1], "num_tokens": total}
