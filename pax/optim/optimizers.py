"""Optimizers from an OptimizerConfig, built from optax pieces.

adam is praxis's Adam (sharded_adam) as Pax's experiments configure it: gradients clipped to a
global norm (the learner's clip_gradient_norm_to_value), Adam's bias-corrected moments, each
tensor's update capped to RMS clip_threshold, decoupled weight decay on every parameter, all
scaled by the learning rate. adafactor is praxis's ShardedAdafactor (pax.optim.adafactor).

A stacked leaf [layers, ...] counts as one tensor per layer (pax.optim.per_layer, praxis's
optimizer_prefix_vectorization): its capping and decay mask are evaluated layer by layer, while
the global-norm clip sees every parameter at once, as praxis's learner clips before its
vectorized optimizer.
"""

import functools

import jax
import optax

from pax.experiments.config import OptimizerConfig
from pax.optim import adafactor, adam, finite, per_layer, schedules

# skip_if_not_finite gives up after this many non-finite steps in a row; the loop's NAN_POLICY
# decides long before that whether to stop.
_MAX_CONSECUTIVE_NONFINITE = 1_000_000


def build(
    config: OptimizerConfig, repeat_prefix=None
) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """The transformation and its learning-rate schedule (for logging).

    repeat_prefix: a tree shaped like the parameters holding each leaf's number of stacked
    layer dimensions (pax.train.state.repeat_prefix); None: nothing is stacked.

    Updates with non-finite gradients are skipped (pax.optim.finite: optax.apply_if_finite's
    rule without its branch), so NaNs never reach the parameters; the state's total_notfinite
    counts them.

    Equal configs and prefixes get the same two objects: the steps made of them are then the
    same functions, which jax traces and compiles once a process (a rerun, a notebook's sweep).
    """
    leaves, treedef = jax.tree.flatten(repeat_prefix)
    return _build(config, tuple(leaves), treedef)


@functools.lru_cache(maxsize=16)
def _build(config: OptimizerConfig, prefix_leaves: tuple, prefix_treedef):
    repeat_prefix = jax.tree.unflatten(prefix_treedef, prefix_leaves)
    lr = schedules.build(config)
    clip = (
        [optax.clip_by_global_norm(config.clip_gradient_norm_to_value)]
        if config.clip_gradient_norm_to_value > 0
        else []
    )
    # Adam's and AdamW's moment decays and epsilons, under optax's names.
    moments = dict(
        b1=config.adam_beta1,
        b2=config.adam_beta2,
        eps=config.adam_epsilon,
        eps_root=config.adam_epsilon_root,
    )
    if config.optimizer == "adam":
        # praxis sharded_adam: update = m̂ / (sqrt(v̂ + eps_root) + eps), capped per tensor to
        # RMS clip_threshold (optax.clip_by_block_rms is exactly its clip_update), plus
        # weight_decay * w, times -lr. Its bias-corrected decays give optax's m̂ and v̂.
        capping = (
            [per_layer.clip_by_block_rms(config.adam_clip_threshold, repeat_prefix)]
            if config.adam_clip_threshold > 0
            else []
        )
        tx = optax.chain(
            *clip,
            adam.scale_by_adam(**moments),
            *capping,
            optax.add_decayed_weights(config.weight_decay),
            optax.scale_by_learning_rate(lr),
        )
    elif config.optimizer == "adamw":
        # The common AdamW: no decay on vectors (norm scales and biases), stacked or not.
        tx = optax.chain(
            *clip,
            optax.adamw(
                lr,
                **moments,
                weight_decay=config.weight_decay,
                mask=per_layer.matrices_only(repeat_prefix),
            ),
        )
    elif config.optimizer == "adafactor":
        tx = optax.chain(
            *clip,
            adafactor.adafactor(
                lr,
                beta1=config.adam_beta1,
                decay_adam=config.adam_beta2,
                clip_threshold=config.adam_clip_threshold,
                weight_decay=config.weight_decay,
                prefix=repeat_prefix,
            ),
        )
    else:
        raise ValueError(f"unknown optimizer {config.optimizer!r}")
    return finite.skip_if_not_finite(tx, _MAX_CONSECUTIVE_NONFINITE), lr
