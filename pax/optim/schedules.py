"""Pax's learning-rate schedules, as optax schedules of the absolute learning rate."""

import optax

from pax.experiments.config import ScheduleConfig

SCHEDULES = ("constant", "linear_rampup_exponential_decay", "linear_rampup_cosine_decay")


def _rampup_then(peak: float, config: ScheduleConfig, decay: optax.Schedule) -> optax.Schedule:
    """Linear 0 → peak over warmup, peak until decay_start, then `decay` (counted from 0)."""
    schedules, boundaries = [], []
    if config.warmup_steps > 0:
        schedules.append(optax.linear_schedule(0.0, peak, config.warmup_steps))
        boundaries.append(config.warmup_steps)
    if config.decay_start > config.warmup_steps:
        schedules.append(optax.constant_schedule(peak))
        boundaries.append(config.decay_start)
    schedules.append(decay)
    return optax.join_schedules(schedules, boundaries) if boundaries else decay


def build(peak: float, config: ScheduleConfig) -> optax.Schedule:
    decay_steps = max(config.decay_end - config.decay_start, 1)
    if config.kind == "constant":
        return optax.constant_schedule(peak)
    if config.kind == "linear_rampup_exponential_decay":
        # Pax's LinearRampupExponentialDecay: exponential from peak to min_ratio·peak, then flat.
        decay = optax.exponential_decay(
            peak,
            transition_steps=decay_steps,
            decay_rate=config.min_ratio,
            end_value=peak * config.min_ratio,
        )
        return _rampup_then(peak, config, decay)
    if config.kind == "linear_rampup_cosine_decay":
        decay = optax.cosine_decay_schedule(peak, decay_steps, alpha=config.min_ratio)
        return _rampup_then(peak, config, decay)
    raise ValueError(f"unknown learning-rate schedule {config.kind!r}")
