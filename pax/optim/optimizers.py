"""Optimizers from an OptimizerConfig, all optax."""

import jax
import optax

from pax.experiments.config import OptimizerConfig
from pax.optim import schedules

OPTIMIZERS = ("adam", "adamw", "adafactor")
# apply_if_finite gives up after this many non-finite steps in a row; the loop's NAN_POLICY
# decides long before that whether to stop.
_MAX_CONSECUTIVE_NONFINITE = 1_000_000


def _matrices_only(params):
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def build(config: OptimizerConfig) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """The transformation and its learning-rate schedule (for logging).

    Updates with non-finite gradients are skipped (optax.apply_if_finite), so NaNs never reach
    the parameters; the state's total_notfinite counts them.
    """
    lr = schedules.build(config.learning_rate, config.schedule)
    clip = (
        [optax.clip_by_global_norm(config.clip_gradient_norm_to_value)]
        if config.clip_gradient_norm_to_value > 0
        else []
    )
    if config.kind == "adam":
        # Pax's Adam: decoupled weight decay on every parameter, scaled by the learning rate.
        tx = optax.chain(
            *clip,
            optax.scale_by_adam(b1=config.beta1, b2=config.beta2, eps=config.epsilon),
            optax.add_decayed_weights(config.weight_decay),
            optax.scale_by_learning_rate(lr),
        )
    elif config.kind == "adamw":
        # The common AdamW: no decay on vectors (norm scales and biases).
        tx = optax.chain(
            *clip,
            optax.adamw(
                lr,
                b1=config.beta1,
                b2=config.beta2,
                eps=config.epsilon,
                weight_decay=config.weight_decay,
                mask=_matrices_only,
            ),
        )
    elif config.kind == "adafactor":
        tx = optax.chain(*clip, optax.adafactor(lr, weight_decay_rate=config.weight_decay or None))
    else:
        raise ValueError(f"unknown optimizer {config.kind!r}; known: {', '.join(OPTIMIZERS)}")
    return optax.apply_if_finite(tx, _MAX_CONSECUTIVE_NONFINITE), lr
