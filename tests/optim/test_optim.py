import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from pax.decode.generate import unscan
from pax.experiments.config import PARAMS, OptimizerConfig
from pax.models.transformer import TransformerLm, lm_loss
from pax.optim import optimizers, schedules
from pax.train.instantiate import instantiate
from pax.train.step import make_train_step
from tests.helpers import Tiny, derive


def _opt(**kw) -> OptimizerConfig:
    return OptimizerConfig(**{"lr_schedule": "constant", **kw})


def _schedule(name, learning_rate, warmup, decay):
    """Schedule NAME: linear warmup over WARMUP steps, then decay from step DECAY[0] to DECAY[1]
    down to 0.1 of the rate; jitted, one program for every step rather than one per op."""
    steps = dict(lr_warmup_steps=warmup, lr_decay_start=decay[0], lr_decay_end=decay[1])
    return jax.jit(
        schedules.build(
            _opt(learning_rate=learning_rate, lr_schedule=name, lr_min_ratio=0.1, **steps)
        )
    )


def test_linear_rampup_exponential_decay_matches_pax():
    # Pax's defaults: warmup 4000, decay 4001 -> 300000, min ratio 0.1.
    lr = _schedule("linear_rampup_exponential_decay", 1e-3, 4000, (4001, 300000))
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
    lr = _schedule("linear_rampup_cosine_decay", 2e-4, 265, (266, 108600))
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


@pytest.mark.parametrize("kind", PARAMS["OPTIMIZER"].choices)
def test_optimizers_take_a_step_downhill(kind):
    tx, _ = optimizers.build(_opt(optimizer=kind, learning_rate=0.1))
    params = {"w": jnp.ones((4, 4)), "b": jnp.ones((4,))}

    def loss(p):
        return jnp.sum(p["w"] ** 2) + jnp.sum(p["b"] ** 2)

    @jax.jit  # the three steps as one program, not one per op
    def descend(params):
        state = tx.init(params)
        for _ in range(3):
            updates, state = tx.update(jax.grad(loss)(params), state, params)
            params = optax.apply_updates(params, updates)
        return loss(params)

    assert float(descend(params)) < 20.0 - 1.0


def test_pax_adam_clips_and_decays():
    cfg = _opt(learning_rate=0.1, clip_gradient_norm_to_value=1.0, weight_decay=0.5)
    tx, _ = optimizers.build(cfg)
    params = {"w": jnp.full((2,), 2.0)}
    updates, _ = _first_update(tx, {"w": jnp.zeros((2,))}, params)
    # Zero gradient: only decoupled weight decay moves the weights, by lr * wd * w.
    np.testing.assert_allclose(updates["w"], -0.1 * 0.5 * 2.0, rtol=1e-6)


def _first_update(tx, grads, params):
    """TX's update on its first step, jitted: one program rather than one per op."""
    return jax.jit(lambda g, p: tx.update(g, tx.init(p), p))(grads, params)


def test_adam_clip_threshold_caps_each_tensors_update_rms():
    """praxis sharded_adam: update / max(1, rms(update) / clip_threshold), per tensor. The first
    Adam step is g / (|g| + eps) (m̂ = g, v̂ = g²): RMS ~1 for the big tensor, so a threshold
    of 0.25 scales it by 0.25 / rms; the small tensor's update is under the cap and stays."""
    eps, lr = 1e-6, 1.0
    g_big = np.array([3.0, -4.0, 0.5, 2.0], np.float32)
    g_small = np.array([1e-7, -1e-7], np.float32)  # |g| << eps: update ±0.09, under the cap
    cfg = _opt(learning_rate=lr, adam_epsilon=eps, adam_clip_threshold=0.25)
    tx, _ = optimizers.build(cfg)
    params = {"big": jnp.zeros(4), "small": jnp.zeros(2)}
    grads = {"big": jnp.asarray(g_big), "small": jnp.asarray(g_small)}
    updates, _ = _first_update(tx, grads, params)
    raw = g_big / (np.abs(g_big) + eps)
    np.testing.assert_allclose(
        np.asarray(updates["big"]), -lr * raw * 0.25 / np.sqrt(np.mean(raw**2)), rtol=1e-5
    )
    np.testing.assert_allclose(
        np.asarray(updates["small"]), -lr * g_small / (np.abs(g_small) + eps), rtol=1e-5
    )
    # Disabled (Pax's GPT-3 configs: ADAM_CLIP_THRESHOLD = -1): the raw Adam step.
    tx, _ = optimizers.build(_opt(learning_rate=lr, adam_epsilon=eps, adam_clip_threshold=-1.0))
    updates, _ = _first_update(tx, grads, params)
    np.testing.assert_allclose(
        np.asarray(updates["big"]), -g_big / (np.abs(g_big) + eps), rtol=1e-5
    )


def _praxis_adafactor_reference(grads_per_step, params, lr, beta1, decay_adam, clip, wd):
    """praxis _ShardedAdafactorHelper.compute_var_and_slot_update, written out in numpy from its
    source (factored over the last two axes, Adam-style decay, update clipping, momentum on the
    lr-scaled update, decoupled decay lr * wd * w); returns the parameters after each step."""
    params = {k: v.astype(np.float64) for k, v in params.items()}
    state = {k: dict(vr=None, vc=None, v=None, m=np.zeros_like(v)) for k, v in params.items()}
    history = []
    for step, grads in enumerate(grads_per_step):
        t = step + 1.0
        decay = decay_adam * (1 - decay_adam ** (t - 1)) / (1 - decay_adam**t)
        for k, g in grads.items():
            g = g.astype(np.float64)
            s = state[k]
            g2 = g**2 + 1e-30
            if g.ndim >= 2:
                row, col = g2.mean(axis=-1), g2.mean(axis=-2)
                s["vr"] = row if s["vr"] is None else decay * s["vr"] + (1 - decay) * row
                s["vc"] = col if s["vc"] is None else decay * s["vc"] + (1 - decay) * col
                r = 1 / np.sqrt(s["vr"] / s["vr"].mean(axis=-1, keepdims=True))
                x = g * r[..., :, None] * (1 / np.sqrt(s["vc"]))[..., None, :]
            else:
                s["v"] = g2 if s["v"] is None else decay * s["v"] + (1 - decay) * g2
                x = g / np.sqrt(s["v"])
            x = x / max(1.0, np.sqrt(np.mean(x**2)) / clip)
            sub = beta1 * s["m"] + (1 - beta1) * lr * x
            s["m"] = sub
            params[k] = params[k] - (sub + wd * lr * params[k])
        history.append({k: v.copy() for k, v in params.items()})
    return history


def test_adafactor_matches_praxis_algorithm():
    rng = np.random.default_rng(0)
    params = {
        "w": rng.normal(size=(3, 5, 4)).astype(np.float32),  # factored over (5, 4), per slice
        "b": rng.normal(size=(6,)).astype(np.float32),
    }
    steps = [
        {k: (rng.normal(size=v.shape) * (i + 1)).astype(np.float32) for k, v in params.items()}
        for i in range(4)
    ]
    lr, wd = 0.05, 0.1
    cfg = _opt(
        optimizer="adafactor",
        learning_rate=lr,
        adam_beta1=0.9,
        adam_beta2=0.99,
        adam_clip_threshold=1.0,
        weight_decay=wd,
    )
    tx, _ = optimizers.build(cfg)
    expected = _praxis_adafactor_reference(steps, params, lr, 0.9, 0.99, 1.0, wd)

    @jax.jit  # one program for the four steps rather than one per op
    def step(grads, state, p):
        updates, state = tx.update(grads, state, p)
        return optax.apply_updates(p, updates), state

    p = {k: jnp.asarray(v) for k, v in params.items()}
    state = jax.jit(tx.init)(p)
    for i, grads in enumerate(steps):
        p, state = step(grads, state, p)
        for k in p:
            np.testing.assert_allclose(
                np.asarray(p[k]), expected[i][k], rtol=2e-5, atol=1e-6, err_msg=f"step {i} {k}"
            )


# --- per-layer updates of stacked parameters -----------------------------------------------


def _per_layer_run(optimizer, stacked, **kw):
    """Tiny with every update capped (a threshold under each layer's update RMS) and weight
    decay large enough to move norm scales and biases within a few steps."""
    experiment = derive(
        Tiny,
        USE_REPEATED_LAYER=stacked,
        OPTIMIZER=optimizer,
        LR_SCHEDULE="constant",
        LEARNING_RATE=0.05,
        WEIGHT_DECAY=0.5,
        CLIP_GRADIENT_NORM_TO_VALUE=1.0,
        **kw,
    )
    return instantiate(experiment(), with_data=False)


@functools.cache
def _unrolled_params_and_grad(model_cfg):
    """MODEL_CFG's initial parameters and its jitted loss gradient on fixed tokens, built once
    for the optimizers that share the model."""
    model = TransformerLm(model_cfg)
    tokens = jax.random.randint(jax.random.key(1), (4, 33), 0, 256)
    params = nn.unbox(jax.jit(model.init)(jax.random.key(0), tokens[:, :-1]))["params"]

    @jax.jit
    def grad(params):
        def loss(p):
            logits = model.apply({"params": p}, tokens[:, :-1])
            return lm_loss(logits, tokens[:, 1:], jnp.ones(tokens[:, 1:].shape))[0]

        return jax.grad(loss)(params)

    return params, grad


def _stack(unrolled, num_layers):
    """The inverse of pax.decode.generate.unscan on a parameter tree."""
    layers = [unrolled[f"layer_{i}"] for i in range(num_layers)]
    rest = {k: v for k, v in unrolled.items() if not k.startswith("layer_")}
    return {**rest, "layers": jax.tree.map(lambda *a: jnp.stack(a), *layers)}


@pytest.mark.parametrize(
    "optimizer,extra",
    [
        ("adam", {"ADAM_CLIP_THRESHOLD": 0.5, "ADAM_EPSILON": 1e-3}),
        ("adamw", {}),
        ("adafactor", {"ADAM_CLIP_THRESHOLD": 0.5}),
    ],
)
def test_stacked_layers_get_the_updates_of_the_same_layers_unstacked(optimizer, extra):
    """praxis vectorizes its optimizers over a stacked variable's repeat prefix
    (praxis/optimizer_prefix_vectorization.py, get_transformations_with_vectorized_repeat_prefix,
    called by learners.Learner.get_grad_tx), so a [layers, ...] leaf is updated as that many
    separate variables: update capping (sharded_adam's clip_update, ShardedAdafactor's
    clip_threshold), the decay mask and Adafactor's factoring per layer. The optimizers of a
    model with repeated layers and of the same model unrolled (both as the trainer builds them)
    must then give the same updates, step after step, for the same gradients."""
    layers = Tiny.NUM_LAYERS
    stacked_tx = _per_layer_run(optimizer, True, **extra).tx
    run = _per_layer_run(optimizer, False, **extra)
    unrolled, grad = _unrolled_params_and_grad(run.task.model)
    unrolled_tx = run.tx

    # Both optimizers' steps, the restacking around them and the parameter updates as one
    # program, rather than one per op.
    @jax.jit
    def init(unrolled):
        stacked = _stack(unrolled, layers)
        return stacked, stacked_tx.init(stacked), unrolled_tx.init(unrolled)

    @jax.jit
    def update(g, unrolled, unrolled_state, stacked, stacked_state):
        u_updates, unrolled_state = unrolled_tx.update(g, unrolled_state, unrolled)
        s_updates, stacked_state = stacked_tx.update(_stack(g, layers), stacked_state, stacked)
        s_unstacked = unscan({"params": s_updates}, layers)["params"]
        unrolled = optax.apply_updates(unrolled, u_updates)
        stacked = optax.apply_updates(stacked, s_updates)
        return s_unstacked, u_updates, unrolled, unrolled_state, stacked, stacked_state

    stacked, stacked_state, unrolled_state = init(unrolled)
    for step in range(3):
        s_unstacked, u_updates, *state = update(
            grad(unrolled), unrolled, unrolled_state, stacked, stacked_state
        )
        unrolled, unrolled_state, stacked, stacked_state = state
        for (path, a), b in zip(
            jax.tree_util.tree_leaves_with_path(s_unstacked), jax.tree.leaves(u_updates)
        ):
            np.testing.assert_allclose(
                np.asarray(a),
                np.asarray(b),
                atol=1e-6,
                rtol=0,
                err_msg=f"step {step} {jax.tree_util.keystr(path)}",
            )


def test_logged_learning_rate_is_the_one_the_optimizer_applies_after_a_skipped_step():
    """optax.apply_if_finite leaves the optimizer's schedules alone on a non-finite step, so
    after one the rate applied lags the step number; the logged rate is the applied one (the
    scale_by_learning_rate count inside the Adam chain)."""
    # One layer: the claim is the optimizer's counts, whatever the model.
    exp = derive(
        Tiny,
        NUM_LAYERS=1,
        LR_SCHEDULE="linear_rampup_cosine_decay",
        LR_WARMUP_STEPS=10,
        LR_DECAY_START=10,
    )
    run = instantiate(exp(), with_data=False)
    model = TransformerLm(run.task.model)
    tokens = np.random.RandomState(1).randint(0, 256, (2, 17))
    params = nn.unbox(jax.jit(model.init)(jax.random.key(0), tokens[:, :-1]))["params"]
    opt_state = jax.jit(run.tx.init)(params)  # one program, not one per op and shape
    state = {"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": opt_state}
    step = jax.jit(make_train_step(model, run.tx, run.lr_schedule))
    batch = {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "weights": np.ones((2, 16), np.float32),
    }
    for weights in (1.0, np.nan, 1.0, 1.0):  # the second step's loss is NaN: skipped
        state, metrics = step(state, {**batch, "weights": batch["weights"] * weights})
    # apply_if_finite(chain(global-norm clip, scale_by_adam, clip, decay, scale_by_learning_rate))
    applied_before_last = int(state["opt_state"].inner_state[-1].count) - 1
    assert applied_before_last == 2 and int(metrics["skipped_steps"]) == 1
    lr_schedule = jax.jit(run.lr_schedule)  # one program, not one per op
    np.testing.assert_allclose(metrics["learning_rate"], lr_schedule(applied_before_last))
    assert float(lr_schedule(3)) != float(lr_schedule(2))
