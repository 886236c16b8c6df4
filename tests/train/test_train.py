"""End to end on virtual CPU devices: losses across meshes, resume, job directory contents."""

import glob
import json
import math
import os

import jax
import numpy as np
import pytest

from pax.train import loop
from pax.train.instantiate import instantiate
from tests.helpers import Tiny, derive, read_metrics, read_scalars

NAME = "tests.Tiny"


def _train(job_dir, experiment_cls, devices=None, checkpoint_saving=True):
    run = instantiate(experiment_cls(), devices=devices)
    loop.train(run, str(job_dir), NAME, checkpoint_saving=checkpoint_saving)
    return read_metrics(job_dir)


@pytest.fixture(scope="module")
def reference_run(tiny_job):
    """6 steps of Tiny on one device, global batch 8 (the session's shared run)."""
    return tiny_job, read_metrics(tiny_job)


# The fast tier splits all three mesh axes at once; the slow tier adds pure data and data x mdl.
@pytest.mark.parametrize(
    "mesh",
    [
        pytest.param((1, 8, 1), marks=pytest.mark.slow),
        pytest.param((1, 2, 4), marks=pytest.mark.slow),
        (2, 2, 2),
    ],
)
def test_losses_match_across_meshes(reference_run, tmp_path, mesh):
    _, expected = reference_run
    # Same global batch (8) spread over 8 devices. Only the train losses are compared: no eval,
    # no checkpoint (the loop saving sharded arrays: the 2-D mesh run in tests/models/test_fp8.py;
    # a pipeline's: tests/decode/test_decoder.py).
    sharded = derive(Tiny, ICI_MESH_SHAPE=mesh, PERCORE_BATCH_SIZE=1, EVAL_EVERY_N_STEPS=1000)
    metrics = _train(tmp_path, sharded, checkpoint_saving=False)
    # Different reduction orders across shards: agree to 1e-4 relative.
    np.testing.assert_allclose(
        [m["loss"] for m in metrics], [m["loss"] for m in expected], rtol=1e-4
    )
    np.testing.assert_allclose(
        [m["grad_norm"] for m in metrics], [m["grad_norm"] for m in expected], rtol=1e-3
    )


def test_resume_continues_exactly(reference_run, tmp_path):
    _, expected = reference_run
    one = jax.devices()[:1]
    _train(tmp_path, derive(Tiny, NUM_TRAIN_STEPS=3), devices=one)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["checkpoint_00000003"]
    resumed = _train(tmp_path, Tiny, devices=one)
    # The rerun starts at step 4; the restored state and the step-indexed data make it exact.
    steps = [m["step"] for m in resumed]
    assert steps == [1, 2, 3, 4, 5, 6]
    np.testing.assert_allclose(
        [m["loss"] for m in resumed[3:]], [m["loss"] for m in expected[3:]], rtol=1e-6
    )


def test_rerun_of_a_finished_job_trains_no_more(tiny_job_copy):
    before = read_metrics(tiny_job_copy)
    again = _train(tiny_job_copy, Tiny, devices=jax.devices()[:1])
    assert again == before and [m["step"] for m in again] == [1, 2, 3, 4, 5, 6]


def test_a_second_run_of_an_experiment_in_one_process_traces_none_of_its_steps(
    reference_run, tmp_path
):
    # reference_run trained Tiny on one device in this process: its init, train and eval steps
    # are traced once (jax reports each trace with its function's name).
    traced = []

    def listen(event, duration, fun_name=None, **_):
        if event == "/jax/core/compile/jaxpr_trace_duration":
            traced.append(fun_name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        metrics = _train(tmp_path, Tiny, devices=jax.devices()[:1])
        jax.jit(lambda x: x + 1).lower(1.0)  # a new function: the listener hears its trace
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert "<lambda>" in traced
    assert not {"init", "train_step", "eval_step"} & set(traced), traced
    # The same programs on the same data: the same losses.
    np.testing.assert_allclose(
        [m["loss"] for m in metrics], [m["loss"] for m in reference_run[1]], rtol=1e-6
    )


def test_job_directory_layout_and_contents(reference_run):
    job_dir, metrics = reference_run
    assert sorted(os.listdir(job_dir / "checkpoints")) == [
        "checkpoint_00000003",
        "checkpoint_00000006",
    ]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    for m in metrics:
        for key in (
            "loss",
            "log_pplx",
            "learning_rate",
            "grad_norm",
            "step_time_s",
            "tokens_per_s",
            "mfu",
        ):
            assert key in m
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    assert 0 < metrics[-1]["mfu"] < 1
    evals = read_metrics(job_dir, "eval_test_embedded")
    assert [e["step"] for e in evals] == [3, 6]

    train_events = glob.glob(str(job_dir / "summaries/train/events.out.tfevents.*"))
    assert len(train_events) == 1
    scalars = read_scalars(train_events[0])
    assert [s for s, _ in scalars["loss"]] == [1, 2, 3, 4, 5, 6]
    np.testing.assert_allclose(
        [v for _, v in scalars["loss"]], [m["loss"] for m in metrics], rtol=1e-6
    )
    eval_events = glob.glob(str(job_dir / "summaries/eval_test_embedded/events.out.tfevents.*"))
    assert [s for s, _ in read_scalars(eval_events[0])["loss"]] == [3, 6]

    config = json.loads((job_dir / "config.json").read_text())
    assert config["experiment"] == NAME
    assert config["task"]["model"]["num_layers"] == 2
    manifest = json.loads((job_dir / "manifest.json").read_text())
    assert manifest["headline_packages"]["jax"] == jax.__version__
    assert manifest["devices"] == {
        "platform": "cpu",
        "device_kind": "cpu",
        "count": 1,
        "process_count": 1,
    }
    assert manifest["mesh"] == {"replica": 1, "data": 1, "mdl": 1}
    assert manifest["peak_flops"]["flops"] > 1e9


def test_eval_mode_reads_the_newest_checkpoint(tiny_job_copy):
    # A copy: evaluating appends an eval record, which other tests' reads of the shared run
    # must not see.
    job_dir = tiny_job_copy
    run = instantiate(Tiny(), devices=jax.devices()[:1])
    results = loop.evaluate(run, str(job_dir), NAME)
    last_eval = read_metrics(job_dir, "eval_test_embedded")[-2]  # written by training at step 6
    assert last_eval["step"] == 6
    assert math.isclose(results["eval_test_embedded"]["loss"], last_eval["loss"], rel_tol=1e-5)
