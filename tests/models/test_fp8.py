"""USE_FP8 on virtual CPU devices (XLA emulates FP8): losses, the OWG state, checkpoints, SPMD."""

import dataclasses
import types

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from pax.checkpoint.manager import Checkpointer
from pax.experiments import overrides, registry
from pax.models.fp8 import OWG
from pax.parallel import sharding
from pax.train import loop
from pax.train import state as state_lib
from pax.train.instantiate import instantiate
from pax.train.step import make_train_step
from tests.helpers import Tiny, derive, read_metrics

STEPS = 8
E4M3_MAX, E5M2_MAX = 448.0, 57344.0
FP8_EINSUMS = (
    ("attention", "qkv_fp8"),
    ("attention", "post_fp8"),
    ("ffn", "wi_fp8"),
    ("ffn", "wo_fp8"),
)
Fp8Tiny = derive(Tiny, USE_FP8=True, NUM_TRAIN_STEPS=STEPS)


class _Trace:
    """`steps` train steps of an experiment, keeping every state (no donation) and the metrics."""

    def __init__(self, experiment_cls, devices, steps=STEPS):
        self.run = instantiate(experiment_cls(), devices=devices)
        self.abstract, shardings = state_lib.shardings(self.run.model, self.run.tx, self.run.mesh)
        self.step = jax.jit(
            make_train_step(self.run.model, self.run.tx, self.run.lr_schedule),
            in_shardings=(shardings, sharding.batch_sharding(self.run.mesh)),
            out_shardings=(shardings, sharding.replicated(self.run.mesh)),
        )
        self.states = [
            state_lib.initialize(self.run.model, self.run.tx, shardings, self.run.task.train.seed)
        ]
        self.metrics = []
        for i in range(steps):
            state, metrics = self.step(self.states[-1], self.batch(i))
            self.states.append(state)
            self.metrics.append(jax.device_get(metrics))

    def batch(self, i):
        spec = sharding.batch_sharding(self.run.mesh)
        return jax.device_put(self.run.train_data.batch(i, self.run.global_batch), spec)

    def losses(self):
        return np.array([m["loss"] for m in self.metrics])


@pytest.fixture(scope="module")
def f32(tmp_path_factory):
    """F32's losses and gradient norms over the same steps: trained through the loop, whose
    init, step and eval programs are the session's tiny_job's (the compilation cache has them)."""
    run = instantiate(derive(Tiny, NUM_TRAIN_STEPS=STEPS)(), devices=jax.devices()[:1])
    job = tmp_path_factory.mktemp("f32")
    loop.train(run, str(job), "tests.Tiny", checkpoint_saving=False)
    metrics = read_metrics(job)
    return types.SimpleNamespace(
        metrics=metrics,
        losses=lambda: np.array([m["loss"] for m in metrics]),
        abstract=state_lib.shardings(run.model, run.tx, run.mesh)[0],
    )


@pytest.fixture(scope="module")
def fp8():
    return _Trace(Fp8Tiny, jax.devices()[:1])


def test_use_fp8_is_an_overridable_attribute_and_the_fp8_experiments_set_it():
    assert not registry.get("LmCloudSpmdTiny")().task().model.use_fp8
    overridden = overrides.apply(registry.get("LmCloudSpmdTiny"), ["USE_FP8=True"])
    assert overridden().task().model.use_fp8
    for name, base in (
        ("C4Spmd1BAdam4ReplicasFp8", "C4Spmd1BAdam4Replicas"),
        ("LmCloudSpmdTinyFp8", "LmCloudSpmdTiny"),
    ):
        fp8_task, task = registry.get(name)().task(), registry.get(base)().task()
        assert fp8_task.model.use_fp8
        assert fp8_task.model == dataclasses.replace(task.model, use_fp8=True)
        assert (fp8_task.optimizer, fp8_task.mesh) == (task.optimizer, task.mesh)


def _owg(state, layer_kind, einsum):
    return jax.device_get(state[OWG]["layers"][layer_kind][einsum])


def test_fp8_loss_tracks_f32(f32, fp8):
    # e4m3 keeps 3 mantissa bits (≤ 6% relative error per element), but each matmul output
    # averages the rounding of 64-128 products; over 8 steps the losses of this 2-layer model
    # stay within 0.01 nats of F32. 0.05 nats (1% of the loss) leaves room for other CPUs.
    np.testing.assert_allclose(fp8.losses(), f32.losses(), atol=0.05)
    assert fp8.losses()[-1] < fp8.losses()[0] - 1.0  # it learns
    assert np.abs(fp8.losses() - f32.losses()).max() > 1e-5  # and really quantizes
    # The gradient norm is the parameters' only: counting the OWG state (24 scales alone add
    # sqrt(24) ≈ 4.9) would put it far off F32's.
    np.testing.assert_allclose(
        [m["grad_norm"] for m in fp8.metrics], [m["grad_norm"] for m in f32.metrics], rtol=0.05
    )


def test_owg_state_is_f32_stacked_per_layer_and_not_a_parameter(f32, fp8):
    owg = fp8.states[0][OWG]["layers"]
    assert sorted((k, sorted(v)) for k, v in owg.items()) == [
        ("attention", ["post_fp8", "qkv_fp8"]),
        ("ffn", ["wi_fp8", "wo_fp8"]),
    ]
    for layer_kind, einsum in FP8_EINSUMS:
        for name, leaf in owg[layer_kind][einsum].items():
            assert leaf.dtype == np.float32
            assert leaf.shape == (
                (Tiny.NUM_LAYERS, 1024) if name.endswith("history") else (Tiny.NUM_LAYERS, 1)
            )
    assert state_lib.num_params(fp8.abstract) == state_lib.num_params(f32.abstract)
    # Adam's moments exist for the parameters only.
    adam = fp8.states[0]["opt_state"].inner_state[1]  # apply_if_finite(chain(clip, adam, ...))
    assert jax.tree.structure(adam.mu) == jax.tree.structure(fp8.states[0]["params"])


def test_owg_state_is_the_backward_passs_output(fp8):
    s0, s1, s2 = fp8.states[:3]
    # Step 1 records the kernel's amax, per layer (nn.scan slices the state along the layer axis).
    qkv = np.abs(jax.device_get(s0["params"]["layers"]["attention"]["qkv"]))
    history = _owg(s1, "attention", "qkv_fp8")["kernel_amax_history"]
    np.testing.assert_array_equal(history[:, 0], qkv.reshape(Tiny.NUM_LAYERS, -1).max(axis=1))
    assert history[0, 0] != history[1, 0] and not history[:, 1:].any()
    # Delayed scaling: step 2's scales are the amax over the history before it / the format's
    # max, exactly; an optimizer (Adam's step, weight decay) anywhere in the path would break this.
    for layer_kind, einsum in FP8_EINSUMS:
        before, after = _owg(s1, layer_kind, einsum), _owg(s2, layer_kind, einsum)
        for kind, fmax in (("input", E4M3_MAX), ("kernel", E4M3_MAX), ("output_grad", E5M2_MAX)):
            assert before[f"{kind}_amax_history"][:, 0].min() > 0, (einsum, kind)
            np.testing.assert_allclose(
                after[f"{kind}_scale"][:, 0],
                before[f"{kind}_amax_history"].max(axis=1) / fmax,
                rtol=1e-6,
            )
    # The state keeps moving: every step adds an amax to every history.
    last = _owg(fp8.states[-1], "ffn", "wo_fp8")
    assert ((last["output_grad_amax_history"] > 0).sum(axis=1) == STEPS).all()
    assert not np.array_equal(
        last["output_grad_scale"], _owg(s2, "ffn", "wo_fp8")["output_grad_scale"]
    )


def test_checkpoint_restores_the_scales_and_the_next_step_exactly(fp8, tmp_path):
    at = STEPS // 2
    saver = Checkpointer(str(tmp_path), max_to_keep=1, async_save=False)
    saver.save(at, fp8.states[at])
    saver.close()
    reader = Checkpointer(str(tmp_path), max_to_keep=1, saving=False)
    step, restored = reader.restore_latest(fp8.abstract)
    reader.close()
    assert step == at
    jax.tree.map(
        np.testing.assert_array_equal,
        jax.device_get(restored[OWG]),
        jax.device_get(fp8.states[at][OWG]),
    )
    state, metrics = fp8.step(restored, fp8.batch(at))
    assert float(metrics["loss"]) == fp8.metrics[at]["loss"]
    jax.tree.map(
        np.testing.assert_array_equal,
        jax.device_get(state[OWG]),
        jax.device_get(fp8.states[at + 1][OWG]),
    )


def test_2d_mesh_matches_one_device_and_replicates_the_scales(fp8, tmp_path):
    # The whole loop (eval and checkpoints included) on a 2x2 mesh, same global batch of 8.
    experiment = derive(
        Fp8Tiny,
        ICI_MESH_SHAPE=(1, 2, 2),
        PERCORE_BATCH_SIZE=2,
        EVAL_EVERY_N_STEPS=STEPS,
        CHECKPOINT_EVERY_N_STEPS=STEPS,
    )
    run = instantiate(experiment(), devices=jax.devices()[:4])
    loop.train(run, str(tmp_path), "tests.Fp8Tiny")
    metrics = read_metrics(tmp_path)
    # F32 agrees to 1e-4 across meshes (test_train). Here sharded matmuls sum in another order,
    # which moves a few values across an FP8 rounding boundary, and from there the two runs
    # differ like FP8 from F32 (≤ 0.01 nats above; 0.005 seen here): 0.02 nats.
    np.testing.assert_allclose([m["loss"] for m in metrics], fp8.losses(), atol=0.02)
    assert [e["step"] for e in read_metrics(tmp_path, "eval_test_embedded")] == [STEPS]

    abstract, _ = state_lib.shardings(run.model, run.tx, run.mesh)
    reader = Checkpointer(str(tmp_path), max_to_keep=1, saving=False)
    step, state = reader.restore_latest(abstract)
    reader.close()
    assert step == STEPS
    for leaf in jax.tree.leaves(state[OWG]):
        assert leaf.sharding.spec == P() and leaf.sharding.mesh.size == 4
    # Each layer's scales and its histories' maxima (which the next scales come from) agree to
    # 0.6% here; single gradient amaxes of the drifting runs differ by up to 13%. 2%:
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a.max(axis=1), b.max(axis=1), rtol=0.02),
        jax.device_get(state[OWG]),
        jax.device_get(fp8.states[-1][OWG]),
    )


# Slow tier: FP8 under the pipeline; the fast tier has its scales on one device and on a 2-D mesh.
@pytest.mark.slow
def test_pipeline_stages_carry_the_scales_and_combine_microbatches_by_max():
    # 2 stages of 1 layer, 4 microbatches: 5 ticks use each stage's FP8 state.
    piped = derive(
        Fp8Tiny,
        MESH_AXIS_NAMES=("stage", "replica", "data", "mdl"),
        ICI_MESH_SHAPE=(2, 1, 1, 1),
        DCN_MESH_SHAPE=None,
        NUM_STAGES=2,
        NUM_MICROBATCHES=4,
    )
    trace = _Trace(piped, jax.devices()[:2], steps=2)
    s0, s1, s2 = trace.states

    def stages(s):
        return s[OWG]["pipeline"]["ticks"]["stages"]["layers"]

    qkv = np.abs(
        jax.device_get(s0["params"]["pipeline"]["ticks"]["stages"]["layers"]["attention"]["qkv"])
    )
    history = jax.device_get(stages(s1)["attention"]["qkv_fp8"]["kernel_amax_history"])
    assert history.shape == (2, 1, 1024)  # (stages, layers per stage, history)
    # Summed over the 5 ticks instead of max-combined, these would be 5x too large.
    np.testing.assert_array_equal(history[..., 0], qkv.reshape(2, 1, -1).max(axis=-1))
    for layer_kind, einsum in FP8_EINSUMS:
        before = jax.device_get(stages(s1)[layer_kind][einsum])
        after = jax.device_get(stages(s2)[layer_kind][einsum])
        for kind, fmax in (("input", E4M3_MAX), ("kernel", E4M3_MAX), ("output_grad", E5M2_MAX)):
            np.testing.assert_allclose(
                after[f"{kind}_scale"][..., 0],
                before[f"{kind}_amax_history"].max(axis=-1) / fmax,
                rtol=1e-6,
            )
    assert np.isfinite(trace.losses()).all()
