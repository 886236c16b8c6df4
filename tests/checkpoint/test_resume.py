"""Resuming tells damage from mismatch, so a restart on a real scheduler can be trusted.

A job directory rerun with another configuration is a usage error and stays as it was; a
checkpoint written by another model is one too; storage errors that may pass are retried and
never taken for damage; only a checkpoint that cannot be read for a reason of its own is set
aside, with the reason in the log.
"""

import errno
import json
import logging
import os
import re
import shutil

import jax
import orbax.checkpoint as ocp
import pytest

from pax import paths
from pax.checkpoint import manager
from pax.errors import UsageError
from pax.train import job_config, loop
from pax.train.instantiate import instantiate
from tests.helpers import OTHER, Tiny, derive, read_metrics, refusal, train, truncate_files

ROOT = str(paths.ROOT)


@pytest.fixture
def job(tiny_job_copy):
    """A finished Tiny run (checkpoints 3 and 6), copied fresh for each test that changes it."""
    return tiny_job_copy


def _snapshot(job_dir):
    """Every file under job_dir with its size, modification time and (small files) bytes."""
    out = {}
    for root, _, files in os.walk(job_dir):
        for name in files:
            path = os.path.join(root, name)
            stat = os.stat(path)
            small = open(path, "rb").read() if stat.st_size < 65536 else b""
            out[os.path.relpath(path, job_dir)] = (stat.st_size, stat.st_mtime_ns, small)
    return out


def _main(pax_main, job_dir, *sets, flags=(), env=None):
    # One layer: each run is a process of its own that compiles its steps. The sizes of
    # tests/train/test_survival.py's runs, whose programs the persistent compilation cache shares.
    args = ["NUM_LAYERS=1", "MODEL_DIMS=64", "HIDDEN_DIMS=128", "SEQ_LEN=32", "NUM_TRAIN_STEPS=4"]
    args += ["PERCORE_BATCH_SIZE=8", "EVAL_NUM_BATCHES=1"]
    return pax_main.run(
        "--exp=LmCloudSpmdTiny",
        f"--job_log_dir={job_dir}",
        *[f"--set={a}" for a in args + list(sets)],
        "--set=CHECKPOINT_EVERY_N_STEPS=2",
        "--set=EVAL_EVERY_N_STEPS=2",
        *flags,
        env=env,
    )


def test_another_configuration_exits_2_naming_the_field_and_changes_nothing(pax_main, tmp_path):
    # A changed config on an old job directory: checkpoints 2 and 4, then the same job directory with NUM_LAYERS=2.
    first = _main(pax_main, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    before = _snapshot(tmp_path)
    result = _main(pax_main, tmp_path, "NUM_LAYERS=2")
    assert result.returncode == 2, result.stderr[-3000:]
    # The error is one line, the last (the environment line before it is the run's first log).
    lines = result.stderr.strip().splitlines()
    assert (
        [line for line in lines if line.startswith("pax: error:")]
        == lines[-1:]
        == [
            f"pax: error: {tmp_path} holds a run of another configuration: task.model.num_layers is "
            "1 in its config.json, 2 in this run; nothing was changed. Use a new --job_log_dir for "
            "this configuration, or resume that run with --set NUM_LAYERS=1"
        ]
    )
    assert _snapshot(tmp_path) == before
    assert not os.path.exists(tmp_path / "checkpoints_damaged")


@pytest.mark.parametrize(
    "change,named,back",
    [
        ({"USE_FP8": True}, "task.model.use_fp8 is false in its config.json, true in this run;",
         "or resume that run with --set USE_FP8=False"),
        ({"LEARNING_RATE": 0.5, "ACTIVATION": "relu"},
         'task.model.activation is "gelu" in its config.json, "relu" in this run (and 1 more);',
         "or resume that run with --set ACTIVATION=gelu --set LEARNING_RATE=0.003"),
        # config.json's fields carry the attributes' names, so each difference names its --set.
        ({"FPROP_DTYPE": "bfloat16"}, 'task.model.fprop_dtype is "float32"',
         "or resume that run with --set FPROP_DTYPE=float32"),
    ],
)  # fmt: skip
def test_config_json_differences_are_usage_errors(job, change, named, back):
    before = _snapshot(job)
    message = refusal(job, derive(Tiny, **change))
    assert named in message and message.endswith(back)
    assert _snapshot(job) == before


def test_another_experiment_is_named_as_such(job):
    before = _snapshot(job)
    run = instantiate(Tiny(), devices=jax.devices()[:1])
    with pytest.raises(UsageError) as error:
        loop.train(run, str(job), "tests.Other")
    assert str(error.value) == (
        f"{job} holds a run of tests.Tiny, not tests.Other; nothing was changed. Use a new "
        "--job_log_dir for tests.Other, or resume that run with --exp=tests.Tiny"
    )
    assert _snapshot(job) == before


def test_the_sets_that_resume_a_run_are_each_named_once_and_quoted():
    differences = [
        ("task.train.seed", 1234, 7),
        ("task.mesh.ici_mesh_shape", [1, -1, 1], [1, 4, 1]),
        # The datasets repeat what the task derives: the eval input's seed is not SEED.
        ("datasets[0].seed", 1234, 7),
        ("datasets[1].seed", 0, 4321),
    ]
    assert job_config._sets_back(differences) == "--set 'ICI_MESH_SHAPE=[1,-1,1]' --set SEED=1234"


def test_run_length_and_cadence_may_change_on_resume(job):
    train(job, derive(Tiny, NUM_TRAIN_STEPS=7, SUMMARY_EVERY_N_STEPS=7, CHECKPOINT_MAX_TO_KEEP=5))
    assert [m["step"] for m in read_metrics(job)] == [1, 2, 3, 4, 5, 6, 7]


def test_another_model_in_the_checkpoint_is_a_usage_error_without_config_json(job):
    # An older job directory, or one whose config.json was lost: the checkpoint's own metadata
    # (tree, shapes, dtypes) still tells that another model wrote it.
    os.remove(job / "config.json")
    before = _snapshot(job)
    with pytest.raises(UsageError, match=(
        r"checkpoint_00000006 was written by another model: params/layers/\S+ is \[2, .*\] "
        r"float32 there, \[3, .*\] float32 in this run \(and \d+ more\); nothing was moved"
    )):  # fmt: skip
        train(job, derive(Tiny, NUM_LAYERS=3))
    with pytest.raises(UsageError, match=r"this run has _overwrite_with_gradient/"):
        train(job, derive(Tiny, USE_FP8=True))
    assert _snapshot(job) == before


def test_truncated_checkpoint_is_set_aside_with_its_reason_in_the_log(job, caplog):
    truncate_files(job / "checkpoints" / "checkpoint_00000006")
    with caplog.at_level(logging.WARNING):
        train(job, derive(Tiny, NUM_TRAIN_STEPS=7))
    assert os.path.isdir(job / "checkpoints_damaged" / "checkpoint_00000006")
    [record] = [r for r in caplog.records if "is damaged" in r.getMessage()]
    assert record.getMessage().startswith("checkpoint checkpoint_00000006 is damaged (")
    assert "moved to" in record.getMessage()
    assert [m["step"] for m in read_metrics(job)][6:] == [4, 5, 6, 7]


def _truncate_arrays(checkpoint_dir):
    """Damage only the array data: the metadata reads, the restore fails part-way through."""
    truncate_files(checkpoint_dir / "state" / "ocdbt.process_0")


def test_one_damaged_checkpoint_is_one_warning_line_with_the_whole_reason(job, caplog):
    # Without its digests (as written before they were recorded), orbax's read meets the damage.
    os.remove(job / "checkpoints" / "checkpoint_00000006" / manager.DIGESTS)
    _truncate_arrays(job / "checkpoints" / "checkpoint_00000006")
    with caplog.at_level(logging.WARNING):
        train(job, derive(Tiny, NUM_TRAIN_STEPS=7))
    # orbax's own lines about the failed read are held back: the one line says it all.
    unchecked, line = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert unchecked.endswith("checkpoint_00000006 has no SHA256SUMS (written before checkpoints "
                              "recorded their files' sha256): its bytes cannot be checked")  # fmt: skip
    aside = job / "checkpoints_damaged" / "checkpoint_00000006"
    assert line.startswith("checkpoint checkpoint_00000006 is damaged (ValueError: OUT_OF_RANGE: ")
    assert re.search(rf"is not valid for value of size \d+\); moved to {aside}$", line), line
    assert "tensorstore_spec" not in line and "\n" not in line
    assert [m["step"] for m in read_metrics(job)][6:] == [4, 5, 6, 7]


def test_an_abandoned_reads_unretrieved_error_is_not_logged(caplog):
    """asyncio logs a collected future's unread error at ERROR; the reads orbax abandoned on a
    damaged checkpoint end that way, after its one line. Other futures' errors still show."""
    import asyncio
    import gc

    from pax.checkpoint import manager

    manager._drop_abandoned_reads()
    damaged = ValueError('OUT_OF_RANGE: Error reading "params.w/0" in OCDBT database at local')
    try:  # orbax's own wrapping, as a gather of the reads logs it
        raise Exception("Encountered error while reading array index") from damaged
    except Exception as e:
        wrapped = e
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        for error in (damaged, wrapped, ValueError("something else")):
            loop = asyncio.new_event_loop()
            loop.create_future().set_exception(error)  # never retrieved
            loop.close()
            gc.collect()
    # Other tests' leftovers may be collected here too: only this test's futures are counted.
    shown = [str(r.exc_info[1]) for r in caplog.records if r.name == "asyncio" and r.exc_info]
    assert "something else" in shown
    assert not any("OCDBT" in s or "reading array index" in s for s in shown), shown


def test_every_checkpoint_damaged_stops_naming_them_until_asked_to_start_over(job, caplog):
    for step in (3, 6):
        truncate_files(job / "checkpoints" / f"checkpoint_{step:08d}")
    kept = {k: v for k, v in _snapshot(job).items() if not k.startswith("checkpoints")}
    aside = job / "checkpoints_damaged"
    assert refusal(job, derive(Tiny, NUM_TRAIN_STEPS=7)) == (
        f"every checkpoint under {job}/checkpoints is damaged: checkpoint_00000006, "
        f"checkpoint_00000003, moved to {aside}; nothing was trained. Put good copies back under "
        f"{job}/checkpoints, or rerun with --start_over_if_damaged to train from step 0"
    )
    assert sorted(os.listdir(aside)) == ["checkpoint_00000003", "checkpoint_00000006"]
    assert {k: v for k, v in _snapshot(job).items() if not k.startswith("checkpoints")} == kept
    # The same command again finds no checkpoint, and still does not start from step 0.
    with pytest.raises(UsageError, match=(
        rf"^{job}/checkpoints holds no checkpoint: its run's were set aside as damaged "
        rf"\(checkpoint_00000006, checkpoint_00000003 in {aside}\); nothing was trained"
    )):  # fmt: skip
        train(job, derive(Tiny, NUM_TRAIN_STEPS=7))
    with caplog.at_level(logging.WARNING):
        train(job, derive(Tiny, NUM_TRAIN_STEPS=7), start_over_if_damaged=True)
    assert [m["step"] for m in read_metrics(job)][6:] == [1, 2, 3, 4, 5, 6, 7]
    assert any("training starts over from step 0" in r.getMessage() for r in caplog.records)


# The fast tests above check each claim in-process; these check what a user of pax.main sees.
@pytest.mark.slow
def test_damage_on_the_command_line_is_one_line_each(pax_main, tmp_path):
    first = _main(pax_main, tmp_path / "job")
    assert first.returncode == 0, first.stderr[-3000:]
    for name in ("clean", "damaged", "all"):
        shutil.copytree(tmp_path / "job", tmp_path / name)
    # The same resume from step 2, once because checkpoint 4 is gone, once because it is damaged.
    shutil.rmtree(tmp_path / "clean" / "checkpoints" / "checkpoint_00000004")
    _truncate_arrays(tmp_path / "damaged" / "checkpoints" / "checkpoint_00000004")
    clean = _main(pax_main, tmp_path / "clean", "NUM_TRAIN_STEPS=5")
    damaged = _main(pax_main, tmp_path / "damaged", "NUM_TRAIN_STEPS=5")
    assert clean.returncode == damaged.returncode == 0, damaged.stderr[-3000:]
    extra = [line for line in damaged.stderr.splitlines() if "is damaged" in line]
    assert len(extra) == 1 and " moved to " in extra[0]
    assert len(damaged.stderr.splitlines()) == len(clean.stderr.splitlines()) + 1, damaged.stderr
    # Every checkpoint damaged: one warning line each, then the error, and nothing trained.
    for step in (2, 4):
        truncate_files(tmp_path / "all" / "checkpoints" / f"checkpoint_{step:08d}")
    metrics = (tmp_path / "all" / "metrics.jsonl").read_text()
    stopped = _main(pax_main, tmp_path / "all", "NUM_TRAIN_STEPS=5")
    assert stopped.returncode == 2
    lines = stopped.stderr.strip().splitlines()
    assert lines[-1].startswith(
        f"pax: error: every checkpoint under {tmp_path}/all/checkpoints is damaged: "
        "checkpoint_00000004, checkpoint_00000002, moved to "
    )
    assert sum("is damaged (" in line for line in lines[:-1]) == 2
    assert not [line for line in lines if line.startswith((" ", "Traceback", "Exception"))]
    assert (tmp_path / "all" / "metrics.jsonl").read_text() == metrics


@pytest.mark.slow
def test_another_release_on_the_command_line_is_one_line_and_the_flag_adds_a_segment(
    pax_main, tmp_path
):
    first = _main(pax_main, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    before = _snapshot(tmp_path)
    ours = json.loads((tmp_path / "manifest.json").read_text())["release"]
    other = {"PAX_RELEASE": OTHER, "PAX_LOCKFILE": os.path.join(ROOT, f"releases/{OTHER}/cpu.txt")}
    refused = _main(pax_main, tmp_path, "NUM_TRAIN_STEPS=5", env=other)
    assert refused.returncode == 2
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith(f"pax: error: {tmp_path} was trained up to step 4 on release {ours} ")
    assert f"this is release {OTHER} " in last and last.endswith("as a new segment)")
    assert _snapshot(tmp_path) == before
    allowed = _main(
        pax_main, tmp_path, "NUM_TRAIN_STEPS=5", flags=["--allow_env_change"], env=other
    )
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    segments = json.loads((tmp_path / "manifest.json").read_text())["segments"]
    assert [(s["release"], s["from_step"]) for s in segments] == [(ours, 0), (OTHER, 4)]


def _flaky_restore(monkeypatch, failures):
    """orbax's restore fails with a storage timeout `failures` times, then works."""
    calls = {"n": 0}
    real = ocp.CheckpointManager.restore

    def restore(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] <= failures:
            raise OSError(errno.ETIMEDOUT, "Connection timed out", "/mnt/runs/ckpt")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "restore", restore)
    monkeypatch.setattr(manager, "READ_BACKOFF_S", 0.0)
    return calls


def test_storage_timeouts_are_retried_not_taken_for_damage(job, monkeypatch):
    calls = _flaky_restore(monkeypatch, failures=manager.READ_ATTEMPTS - 1)
    train(job, derive(Tiny, NUM_TRAIN_STEPS=7))
    assert calls["n"] == manager.READ_ATTEMPTS
    assert not os.path.exists(job / "checkpoints_damaged")
    assert [m["step"] for m in read_metrics(job)][6:] == [7]  # resumed at 6


def test_storage_that_stays_down_stops_the_run_and_moves_nothing(job, monkeypatch):
    _flaky_restore(monkeypatch, failures=10**6)
    before = _snapshot(job)
    with pytest.raises(manager.StorageUnavailable, match=(
        r"reading checkpoint_00000006 under .* failed 4 times with storage errors "
        r"\(TimeoutError: .*\); that is not damage, so nothing was moved"
    )):  # fmt: skip
        train(job, derive(Tiny, NUM_TRAIN_STEPS=7))
    after = _snapshot(job)
    # config.json and manifest.json are rewritten as they were (same content); nothing else moved.
    assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in before.items()}
    assert all(after[k] == before[k] for k in before if k.startswith("checkpoints/"))


@pytest.mark.parametrize(
    "error,transient",
    [
        (OSError(errno.EIO, "Input/output error"), True),
        (OSError(errno.ESTALE, "Stale file handle"), True),
        (ConnectionResetError(), True),
        (ValueError("UNAVAILABLE: Connection reset by peer [source locations='...']"), True),
        (FileNotFoundError(errno.ENOENT, "No such file"), False),
        (ValueError("Unexpected end of data while reading the metadata"), False),
    ],
)
def test_which_errors_may_pass(error, transient):
    assert manager.is_transient(error) is transient
    wrapped = RuntimeError("restore failed")
    wrapped.__cause__ = error
    assert manager.is_transient(wrapped) is transient
