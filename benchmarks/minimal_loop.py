"""The baseline: the benchmark model trained as a competent user would write it by hand.

Plain flax + optax + one jax.jit with donated state; batches already on device. It uses the
same TransformerLm and the same optax chain as the trainer so that the math is identical and
only the framework around the step differs (the model itself is measured against
benchmarks/baseline.py, which shares no code with pax).
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
        optax.scale_by_adam(b1=opt.adam_beta1, b2=opt.adam_beta2, eps=opt.adam_epsilon),
        # praxis sharded_adam's per-tensor update cap (ADAM_CLIP_THRESHOLD; <= 0: none).
        *(
            [optax.clip_by_block_rms(opt.adam_clip_threshold)]
            if opt.adam_clip_threshold > 0
            else []
        ),
        optax.add_decayed_weights(opt.weight_decay),
        optax.scale_by_learning_rate(opt.learning_rate),
    )


class MinimalLoop:
    """Initialized on construction; the first `interval` call also compiles the step.

    The same interface as benchmarks.baseline.Baseline, so bench.py interleaves the two. The
    step and the timed interval are written again here on purpose, not shared with Baseline:
    the baseline stays an independent program (tests/benchmarks/test_bench.py pins its imports
    to flax, jax, optax and the standard library), one that nothing measured against it shapes.
    """

    def __init__(self, model_cfg, opt_cfg, batches):
        model = TransformerLm(model_cfg)
        tx = adam(opt_cfg)

        def step(params, opt_state, batch):
            def loss_fn(p):
                logits = model.apply({"params": p}, batch["inputs"])
                return lm_loss(logits, batch["targets"], batch["weights"])[0]

            loss, grads = jax.value_and_grad(loss_fn)(params)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        self.batches = [jax.device_put({k: jnp.asarray(v) for k, v in b.items()}) for b in batches]
        self.params = jax.jit(model.init)(jax.random.key(0), self.batches[0]["inputs"])["params"]
        self.opt_state = tx.init(self.params)
        self.step = jax.jit(step, donate_argnums=(0, 1))
        self.i = 0

    def interval(self, steps: int) -> float:
        """Seconds per step over `steps` steps, all dispatched before one wait."""
        start = time.perf_counter()
        for _ in range(steps):
            batch = self.batches[self.i % len(self.batches)]
            self.params, self.opt_state, self.loss = self.step(self.params, self.opt_state, batch)
            self.i += 1
        self.loss.block_until_ready()
        return (time.perf_counter() - start) / steps
