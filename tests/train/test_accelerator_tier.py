"""The accelerator tier: the trainer on jax's default devices, checked against the CPU.

`python -m pytest -m accelerator -p no:xdist` on a TPU (or GPU) host runs these on the chip, the
CPU beside it as the reference (conftest leaves JAX_PLATFORMS alone for this tier); in the fast
tier they run on CPU alone, where the comparisons hold trivially and the paths still run (the
costly ones in the full tier).
Device counts come from jax.devices(); tolerances from the platform's matmul precision: a TPU's
default passes float32 operands through bfloat16, so comparisons with the CPU are either made
under jax.default_matmul_precision("highest") or given bfloat16's tolerance.
"""

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pax.checkpoint.manager import Checkpointer
from pax.models.transformer import TransformerLm, lm_loss
from pax.train import loop
from pax.train import state as state_lib
from pax.train.instantiate import instantiate
from tests.helpers import Tiny, derive, read_metrics

pytestmark = pytest.mark.accelerator
# On CPU alone the comparisons marked `slow` hold trivially, so they run there in the full tier
# only; the fast tier checks each claim by a CPU test of its own: the kernels' math and
# forward-mode autodiff in tests/models/test_transformer.py, resume in tests/train/test_train.py,
# cached decoding in tests/decode/test_generate.py.

DEVICE = jax.devices()[0]
CPU = jax.devices("cpu")[0]
ON_ACCELERATOR = DEVICE.platform != "cpu"
# Relative error of one matmul at the default precision: bfloat16's 8-bit mantissa on TPU.
DEFAULT_PRECISION_RTOL = 2e-2 if DEVICE.platform == "tpu" else 1e-5
# At "highest", TPU matmuls are float32-accurate; what is left is summation order.
HIGHEST_RTOL = 2e-4

# Head dims of 128 and a length of 128: on a TPU the default attention is the splash kernel.
Kernelled = derive(Tiny, MODEL_DIMS=256, HIDDEN_DIMS=512, NUM_HEADS=2, SEQ_LEN=128)


def _setup(experiment_cls, **model_changes):
    cfg = dataclasses.replace(experiment_cls().task().model, **model_changes)
    model = TransformerLm(cfg)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, cfg.vocab_size, (4, cfg.seq_len + 1)).astype(np.int32)
    batch = dict(
        inputs=tokens[:, :-1], targets=tokens[:, 1:], weights=np.ones((4, cfg.seq_len), np.float32)
    )
    params = nn.unbox(model.init(jax.random.key(0), jnp.asarray(batch["inputs"][:1]))["params"])
    return model, jax.device_get(params), batch


def _loss_and_grads(model, params, batch, device):
    params, batch = jax.device_put((params, batch), device)

    def loss(p):
        return lm_loss(
            model.apply({"params": p}, batch["inputs"]), batch["targets"], batch["weights"]
        )[0]

    value, grads = jax.jit(jax.value_and_grad(loss))(params)
    return float(value), jax.device_get(grads)


def _relative_errors(a, b) -> dict:
    """Per parameter: |a - b| / |b| in the 2-norm."""
    flat_a = dict(jax.tree_util.tree_leaves_with_path(a))
    return {
        jax.tree_util.keystr(path): float(
            np.linalg.norm(np.asarray(flat_a[path]) - np.asarray(v))
            / max(np.linalg.norm(np.asarray(v)), 1e-30)
        )
        for path, v in jax.tree_util.tree_leaves_with_path(b)
    }


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["highest", "default"])
def test_the_default_kernels_give_the_cpus_loss_and_gradients(precision):
    """The device's default forms (plain jnp but for the capped softmax, and on a TPU the splash
    attention kernel) against the CPU's (its XLA:CPU-tuned kernels, XLA attention)."""
    model, params, batch = _setup(Kernelled)
    cpu_model = TransformerLm(
        dataclasses.replace(model.cfg, cpu_kernels="on", attention_kernel="xla")
    )
    rtol = HIGHEST_RTOL if precision == "highest" else DEFAULT_PRECISION_RTOL
    with jax.default_matmul_precision(precision):
        loss, grads = _loss_and_grads(model, params, batch, DEVICE)
        with jax.default_device(CPU):
            cpu_loss, cpu_grads = _loss_and_grads(cpu_model, params, batch, CPU)
    assert math.isfinite(loss)
    assert loss == pytest.approx(cpu_loss, rel=rtol)
    errors = _relative_errors(grads, cpu_grads)
    worst = max(errors, key=errors.get)
    # Gradients add up many matmuls: five times one matmul's tolerance.
    assert errors[worst] < 5 * rtol, (worst, errors[worst])


@pytest.mark.slow
def test_forward_mode_autodiff_of_the_loss_agrees_with_its_gradient():
    """jax.jvp needs the plain forms (CPU_KERNELS=off, ATTENTION_KERNEL=xla: custom VJPs and
    Pallas kernels have no forward mode); its directional derivative equals the default
    kernels' gradient dotted with the same direction."""
    model, params, batch = _setup(Kernelled)
    plain = TransformerLm(dataclasses.replace(model.cfg, cpu_kernels="off", attention_kernel="xla"))
    direction = jax.tree.map(
        lambda p: np.random.default_rng(1).standard_normal(p.shape).astype(np.float32), params
    )
    on_device = jax.device_put((params, direction, batch), DEVICE)

    def loss(m, p, b):
        return lm_loss(m.apply({"params": p}, b["inputs"]), b["targets"], b["weights"])[0]

    with jax.default_matmul_precision("highest"):
        p, d, b = on_device
        _, derivative = jax.jit(lambda p, d: jax.jvp(lambda q: loss(plain, q, b), (p,), (d,)))(p, d)
        _, grads = _loss_and_grads(model, params, batch, DEVICE)
    expected = sum(
        float(np.vdot(g, v)) for g, v in zip(jax.tree.leaves(grads), jax.tree.leaves(direction))
    )
    assert float(derivative) == pytest.approx(expected, rel=5 * HIGHEST_RTOL)


def _train(experiment_cls, job_dir, device):
    return loop.train(instantiate(experiment_cls(), devices=[device]), str(job_dir), "tests.Tiny")


@pytest.mark.slow
@pytest.mark.parametrize(
    "first, then", [(DEVICE, CPU), (CPU, DEVICE)], ids=["device-then-cpu", "cpu-then-device"]
)
def test_a_checkpoint_resumes_on_the_other_platform(tmp_path, first, then):
    """Steps 1-3 on one platform, 4-6 on the other from its checkpoint, against 1-6 on the
    first: the same steps, the losses within the platforms' matmul precision."""
    whole, split = tmp_path / "whole", tmp_path / "split"
    _train(Tiny, whole, first)
    _train(derive(Tiny, NUM_TRAIN_STEPS=3), split, first)
    _train(Tiny, split, then)
    expected, resumed = read_metrics(whole), read_metrics(split)
    assert [r["step"] for r in resumed] == [r["step"] for r in expected] == list(range(1, 7))
    for a, b in zip(resumed[3:], expected[3:]):
        assert a["loss"] == pytest.approx(b["loss"], rel=DEFAULT_PRECISION_RTOL)


def test_an_asynchronous_save_from_the_device_restores_bit_for_bit(tmp_path):
    run = instantiate(Tiny(), devices=[DEVICE])
    abstract, shardings = state_lib.shardings(run.model, run.tx, run.mesh)
    state = state_lib.initialize(run.model, run.tx, shardings, seed=0)
    saver = Checkpointer(str(tmp_path), max_to_keep=1, async_save=True)
    assert saver.save(7, state)
    saver.close()  # waits for the writes that went on after save() returned
    reader = Checkpointer(str(tmp_path), max_to_keep=1)
    restored = reader.restore(7, abstract)
    reader.close()
    assert {d.platform for x in jax.tree.leaves(restored) for d in x.devices()} == {DEVICE.platform}
    for a, b in zip(
        jax.tree.leaves(jax.device_get(state)), jax.tree.leaves(jax.device_get(restored))
    ):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_cached_decoding_equals_recomputation_on_the_device():
    from tests.decode import test_generate as gen_tests

    with jax.default_device(DEVICE), jax.default_matmul_precision("highest"):
        model, variables = gen_tests._model()
        prompts = gen_tests._prompts()
        (_, batch) = next(gen_tests.prompts_lib.batches(prompts, 8, 1, model.cfg.seq_len))
        out = gen_tests._generate(model, variables, batch, max_new=8)
        for row, prompt in enumerate(prompts):
            new = out["tokens"][row]
            full = gen_tests._full_logits(model, variables, np.concatenate([prompt.ids, new]))
            expected = full[len(prompt.ids) - 1 : len(prompt.ids) - 1 + len(new)]
            np.testing.assert_allclose(out["logits"][row], expected, atol=1e-4, rtol=1e-4)
            np.testing.assert_array_equal(new, expected.argmax(-1))


# Slow tier on CPU, where tests/train/test_train.py's meshes make the same claim in the fast
# one; on an accelerator host the tier runs with --full (./noxw -s test -- RELEASE tpu).
@pytest.mark.slow
def test_a_mesh_over_every_device_trains_as_one_device(tmp_path):
    devices = jax.devices()
    if len(devices) < 2:
        pytest.skip(
            f"needs 2 or more devices; jax.devices() has {len(devices)} ({DEVICE.device_kind})"
        )
    mesh = derive(
        Tiny, ICI_MESH_SHAPE=(1, len(devices), 1), PERCORE_BATCH_SIZE=2, NUM_TRAIN_STEPS=2
    )
    one = derive(mesh, ICI_MESH_SHAPE=(1, 1, 1), PERCORE_BATCH_SIZE=2 * len(devices))
    loop.train(instantiate(mesh(), devices=devices), str(tmp_path / "mesh"), "tests.Tiny")
    loop.train(instantiate(one(), devices=devices[:1]), str(tmp_path / "one"), "tests.Tiny")
    for a, b in zip(read_metrics(tmp_path / "mesh"), read_metrics(tmp_path / "one")):
        assert a["loss"] == pytest.approx(b["loss"], rel=DEFAULT_PRECISION_RTOL)
