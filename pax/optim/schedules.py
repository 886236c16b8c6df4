"""Pax's learning-rate schedules (praxis schedules), as optax schedules of the absolute rate."""

import optax

from pax.experiments.config import OptimizerConfig


def _rampup_then(peak: float, config: OptimizerConfig, decay: optax.Schedule) -> optax.Schedule:
    """Linear 0 → peak over warmup, peak until decay_start, then `decay` (counted from 0)."""
    schedules, boundaries = [], []
    if config.lr_warmup_steps > 0:
        schedules.append(optax.linear_schedule(0.0, peak, config.lr_warmup_steps))
        boundaries.append(config.lr_warmup_steps)
    if config.lr_decay_start > config.lr_warmup_steps:
        schedules.append(optax.constant_schedule(peak))
        boundaries.append(config.lr_decay_start)
    schedules.append(decay)
    return optax.join_schedules(schedules, boundaries) if boundaries else decay


def build(config: OptimizerConfig) -> optax.Schedule:
    peak = config.learning_rate
    decay_steps = max(config.lr_decay_end - config.lr_decay_start, 1)
    if config.lr_schedule == "constant":
        return optax.constant_schedule(peak)
    if config.lr_schedule == "linear_rampup_exponential_decay":
        # praxis LinearRampupExponentialDecay: exponential from peak to min_ratio·peak, then flat.
        decay = optax.exponential_decay(
            peak,
            transition_steps=decay_steps,
            decay_rate=config.lr_min_ratio,
            end_value=peak * config.lr_min_ratio,
        )
        return _rampup_then(peak, config, decay)
    if config.lr_schedule == "linear_rampup_cosine_decay":
        # praxis LinearRampupCosineDecay (its DelayedCosine): cosine from peak to min_ratio·peak.
        decay = optax.cosine_decay_schedule(peak, decay_steps, alpha=config.lr_min_ratio)
        return _rampup_then(peak, config, decay)
    raise ValueError(f"unknown learning-rate schedule {config.lr_schedule!r}")
