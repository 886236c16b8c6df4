"""The baseline: the benchmark model trained as a competent user would write it by hand.

Plain flax + optax + one jax.jit with donated state; batches already on device. It uses the
same TransformerLm and the same optax chain as the trainer so that the math is identical and
only the framework around the step differs.
"""

import time

import jax
import jax.numpy as jnp
import optax

from pax.models.transformer import TransformerLm, lm_loss


def adam(opt):
    """Pax's Adam written out with optax, from an OptimizerConfig (constant learning rate)."""
    return optax.chain(
        optax.clip_by_global_norm(opt.clip_gradient_norm_to_value),
        optax.scale_by_adam(b1=opt.beta1, b2=opt.beta2, eps=opt.epsilon),
        optax.add_decayed_weights(opt.weight_decay),
        optax.scale_by_learning_rate(opt.learning_rate),
    )


def run(model_cfg, opt_cfg, batches, steps_per_interval: int, intervals: int) -> list[float]:
    """Seconds per step for each timed interval; one untimed step first compiles."""
    model = TransformerLm(model_cfg)
    tx = adam(opt_cfg)
    params = jax.jit(model.init)(jax.random.key(0), batches[0]["inputs"])["params"]
    opt_state = tx.init(params)

    def step(params, opt_state, batch):
        def loss_fn(p):
            logits = model.apply({"params": p}, batch["inputs"])
            return lm_loss(logits, batch["targets"], batch["weights"])[0]

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    step = jax.jit(step, donate_argnums=(0, 1))
    batches = [jax.device_put({k: jnp.asarray(v) for k, v in b.items()}) for b in batches]
    params, opt_state, loss = step(params, opt_state, batches[0])
    loss.block_until_ready()
    times, i = [], 1
    for _ in range(intervals):
        start = time.perf_counter()
        for _ in range(steps_per_interval):
            params, opt_state, loss = step(params, opt_state, batches[i % len(batches)])
            i += 1
        loss.block_until_ready()
        times.append((time.perf_counter() - start) / steps_per_interval)
    return times
