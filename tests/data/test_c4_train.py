"""The tiny C4 experiment end to end on generated shards: trains, resumes exactly, bad input."""

import os
import types

import jax
import numpy as np
import pytest

pytest.importorskip("grain")  # release 1.5.0 on

from pax.checkpoint import manager  # noqa: E402
from pax.checkpoint.manager import Checkpointer  # noqa: E402
from pax.data import c4  # noqa: E402
from pax.tasks.lm.params.c4 import C4SpmdTinyAdam1Replica  # noqa: E402
from pax.train import loop  # noqa: E402
from pax.train.instantiate import instantiate  # noqa: E402
from tests.helpers import ShortRun, derive, read_metrics  # noqa: E402


class TinyC4(ShortRun, C4SpmdTinyAdam1Replica):
    NUM_LAYERS = 1
    MODEL_DIMS = 32
    HIDDEN_DIMS = 64
    SEQ_LEN = 32
    PERCORE_BATCH_SIZE = 8


def _train(job_dir, experiment_cls):
    run = instantiate(experiment_cls(), devices=jax.devices()[:1])
    loop.train(run, str(job_dir), "tests.TinyC4")
    return read_metrics(job_dir)


@pytest.fixture(scope="module")
def spm_experiment(shards, spm_model):
    return derive(TinyC4, DATA_DIR=str(shards), TOKENIZER_PATH=spm_model, VOCAB_SIZE=300)


def test_trains_and_resumes_exactly(spm_experiment, tmp_path_factory):
    full_dir, cut_dir = tmp_path_factory.mktemp("full"), tmp_path_factory.mktemp("cut")
    expected = _train(full_dir, spm_experiment)
    assert expected[-1]["loss"] < expected[0]["loss"]
    assert all(m["bad_records"] == 0 for m in expected)
    _train(cut_dir, derive(spm_experiment, NUM_TRAIN_STEPS=3))
    saved = cut_dir / "checkpoints" / "checkpoint_00000003" / "data"
    assert "process_0-of-1.json" in os.listdir(saved)  # grain's orbax handler, one per process
    resumed = _train(cut_dir, spm_experiment)
    assert [m["step"] for m in resumed] == [1, 2, 3, 4, 5, 6]
    # The restored state and input position make steps 4-6 those of the uninterrupted run.
    np.testing.assert_allclose(
        [m["loss"] for m in resumed[3:]], [m["loss"] for m in expected[3:]], rtol=1e-6
    )
    np.testing.assert_allclose(
        [m["loss"] for m in read_metrics(cut_dir, "eval_test_c4")],
        [m["loss"] for m in read_metrics(full_dir, "eval_test_c4")],
        rtol=1e-6,
    )


def _stream(shards):
    return instantiate(derive(TinyC4, DATA_DIR=str(shards))(), devices=jax.devices()[:1]).train_data


def test_checkpoints_without_input_position_still_restore(shards, tmp_path):
    state = {"w": np.arange(4.0)}
    old = Checkpointer(str(tmp_path), max_to_keep=2, async_save=False)
    old.save(2, state)  # as written before the input position was saved
    old.close()
    stream = _stream(shards)
    step, restored = Checkpointer(str(tmp_path), 2).restore_latest(
        jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), state), stream
    )
    assert step == 2
    np.testing.assert_array_equal(restored["w"], state["w"])
    # The stream starts from its beginning at the restored step.
    first = _stream(shards).batch(0, 8)
    np.testing.assert_array_equal(stream.batch(2, 8)["targets"], first["targets"])


def test_input_position_of_other_processes_is_a_usage_error(shards, tmp_path, monkeypatch):
    stream = _stream(shards)
    stream.batch(0, 8)
    state = {"w": np.arange(4.0)}
    saver = Checkpointer(str(tmp_path), max_to_keep=2, async_save=False)
    saver.save(1, state, stream)
    saver.close()
    # Resuming as process 0 of 2 (only the check sees it: orbax itself stays single-process).
    monkeypatch.setattr(
        manager, "jax", types.SimpleNamespace(process_index=lambda: 0, process_count=lambda: 2)
    )
    with pytest.raises(
        c4.UsageError,
        match="process_0-of-1.json.*not process_0-of-2.json; resume "
        "with the number of processes that wrote it",
    ):
        Checkpointer(str(tmp_path), 2).restore_latest(
            jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), state), stream
        )
    assert os.path.isdir(tmp_path / "checkpoints" / "checkpoint_00000001")  # not set aside


def test_missing_data_dir_is_a_usage_error(pax_main, tmp_path):
    # --data_dir wins over $C4_DATA_DIR; one device, the experiment's mesh.
    args = ["--exp=C4SpmdTinyAdam1Replica", f"--job_log_dir={tmp_path}/job"]
    proc = pax_main.run(*args, "--data_dir=/nonexistent/c4")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "pax: error: C4 data directory /nonexistent/c4 does not exist; point --data_dir (or "
        "C4_DATA_DIR) at a local copy of C4 en"
    )
    assert not os.path.exists(tmp_path / "job")


def test_multihost_pmap_on_a_stream_needs_tensorstore_checkpoints(shards, monkeypatch):
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    pmap = derive(TinyC4, DATA_DIR=str(shards), ICI_MESH_SHAPE=None)
    with pytest.raises(loop.UsageError, match="holds one input position.*--pmap_use_tensorstore"):
        instantiate(pmap(), devices=jax.devices()[:1])
    assert (
        instantiate(derive(pmap, PMAP_USE_TENSORSTORE=True)(), devices=jax.devices()[:1]).strategy
        == "pmap"
    )
