import math

import numpy as np
import pytest

from pax.experiments.config import OptimizerConfig, ScheduleConfig
from pax.optim import optimizers, schedules


def test_linear_rampup_exponential_decay_matches_pax():
    # Pax's defaults: warmup 4000, decay 4001 -> 300000, min ratio 0.1.
    cfg = ScheduleConfig("linear_rampup_exponential_decay", 4000, 4001, 300000, 0.1)
    lr = schedules.build(1e-3, cfg)
    expected = {
        0: 0.0,
        2000: 0.5e-3,
        4000: 1e-3,
        4001: 1e-3,
        4001 + 148000: 1e-3 * 0.1 ** (148000 / 295999),
        300000: 1e-4,
        400000: 1e-4,
    }
    for step, value in expected.items():
        np.testing.assert_allclose(float(lr(step)), value, rtol=1e-5, atol=1e-12, err_msg=str(step))


def test_linear_rampup_cosine_decay_matches_gpt3():
    cfg = ScheduleConfig("linear_rampup_cosine_decay", 265, 266, 108600, 0.1)
    lr = schedules.build(2e-4, cfg)
    mid = 266 + (108600 - 266) // 2
    frac = (mid - 266) / (108600 - 266)
    expected = {
        0: 0.0,
        265: 2e-4,
        266: 2e-4,
        mid: 2e-4 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac))),
        108600: 2e-5,
        200000: 2e-5,
    }
    for step, value in expected.items():
        np.testing.assert_allclose(float(lr(step)), value, rtol=1e-5, atol=1e-12, err_msg=str(step))


@pytest.mark.parametrize("kind", optimizers.OPTIMIZERS)
def test_optimizers_take_a_step_downhill(kind):
    import jax
    import jax.numpy as jnp
    import optax

    cfg = OptimizerConfig(kind=kind, learning_rate=0.1, schedule=ScheduleConfig("constant"))
    tx, _ = optimizers.build(cfg)
    params = {"w": jnp.ones((4, 4)), "b": jnp.ones((4,))}

    def loss(p):
        return jnp.sum(p["w"] ** 2) + jnp.sum(p["b"] ** 2)

    state = tx.init(params)
    for _ in range(3):
        updates, state = tx.update(jax.grad(loss)(params), state, params)
        params = optax.apply_updates(params, updates)
    assert float(loss(params)) < 20.0 - 1.0


def test_pax_adam_clips_and_decays():
    import jax.numpy as jnp

    cfg = OptimizerConfig(
        kind="adam",
        learning_rate=0.1,
        schedule=ScheduleConfig("constant"),
        clip_gradient_norm_to_value=1.0,
        weight_decay=0.5,
    )
    tx, _ = optimizers.build(cfg)
    params = {"w": jnp.full((2,), 2.0)}
    updates, _ = tx.update({"w": jnp.zeros((2,))}, tx.init(params), params)
    # Zero gradient: only decoupled weight decay moves the weights, by lr * wd * w.
    np.testing.assert_allclose(updates["w"], -0.1 * 0.5 * 2.0, rtol=1e-6)
