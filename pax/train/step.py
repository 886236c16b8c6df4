"""Pure step functions: train_step(state, batch) -> (state, metrics) and eval_step."""
import jax
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
    metrics = {**metrics, 'grad_norm': optax.tree.norm(grads),
               'learning_rate': lr_schedule(state['step'])}
    return new_state, metrics
  return train_step


def make_eval_step(model):
  def eval_step(params, batch):
    logits = model.apply({'params': params}, batch['inputs'])
    return lm_loss(logits, batch['targets'], batch['weights'])[1]
  return eval_step
