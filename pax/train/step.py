"""Pure step functions: train_step(state, batch) -> (state, metrics) and eval_step."""
import jax
import jax.numpy as jnp
import optax

from pax.models.transformer import lm_loss


def make_train_step(model, tx, lr_schedule):
  def train_step(state, batch):
    def loss_fn(params):
      logits = model.apply({'params': params}, batch['inputs'])
      return lm_loss(logits, batch['targets'], batch['weights'])

    (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state['params'])
    updates, opt_state = tx.update(grads, state['opt_state'], state['params'])
    new_state = {'step': state['step'] + 1,
                 'params': optax.apply_updates(state['params'], updates),
                 'opt_state': opt_state}
    grad_norm = optax.tree.norm(grads)
    metrics = {**metrics, 'grad_norm': grad_norm,
               'learning_rate': lr_schedule(state['step']),
               'finite': jnp.isfinite(metrics['loss']) & jnp.isfinite(grad_norm),
               'skipped_steps': opt_state.total_notfinite}  # from optax.apply_if_finite
    return new_state, metrics
  return train_step


def make_eval_step(model):
  def eval_step(params, batch):
    logits = model.apply({'params': params}, batch['inputs'])
    return lm_loss(logits, batch['targets'], batch['weights'])[1]
  return eval_step
