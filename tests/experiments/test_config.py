"""The config layer: every hyper-parameter declared once and checked once; provenance; -1 mesh
dimensions; Pax's pipeline microbatching; eval over the whole split; TARGET_LOG_PPLX."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from pax.data.sources import EVAL_FRACTION, WindowDataset, embedded_text
from pax.data.tokenizers import ByteTokenizer
from pax.errors import UsageError
from pax.experiments import base, config, overrides, registry
from pax.experiments.base import BaseExperiment, resolve
from pax.models import feed_forward, transformer
from pax.parallel import mesh as mesh_lib
from pax.train import loop
from pax.train.instantiate import instantiate
from tests.helpers import Tiny, derive, read_metrics


def test_each_attribute_is_one_declared_field_of_the_same_name():
    names = set()
    for section, record in config.SECTIONS.items():
        for f in dataclasses.fields(record):
            key = f.name.upper()
            assert key not in names
            names.add(key)
            param = config.PARAMS[key]
            assert param.section == section and param.doc
            assert getattr(BaseExperiment, key) == f.default
    assert names == set(config.PARAMS)


def test_declared_choices_are_what_the_code_implements():
    choices = {k: set(p.choices) for k, p in config.PARAMS.items()}
    assert choices["ACTIVATION"] == set(feed_forward.ACTIVATIONS)
    assert choices["REMAT_POLICY"] == set(transformer.REMAT_POLICIES)


def test_class_attributes_are_checked_like_overrides():
    with pytest.raises(UsageError, match=r"NUM_LAYERS = '3' \(class Tiny\) is not an int"):
        resolve(derive(Tiny, NUM_LAYERS="3"))
    with pytest.raises(UsageError, match="FPROP_DTYPE = 'fp16' .* is not one of float32"):
        resolve(derive(Tiny, FPROP_DTYPE="fp16"))


def test_an_undeclared_attribute_is_a_usage_error_naming_it():
    # Pax's own C4SpmdPipelineGpt3SmallAdam64Replicas set a misspelled PER_CORE_BATCH_SIZE.
    with pytest.raises(UsageError, match="PER_CORE_BATCH_SIZE .* did you mean PERCORE_BATCH_SIZE"):
        resolve(derive(Tiny, PER_CORE_BATCH_SIZE=8))
    with pytest.raises(UsageError, match="Pax's LAYERNORM_EPSILON|Pax's MAX_SEQ_LEN is SEQ_LEN"):
        resolve(derive(Tiny, MAX_SEQ_LEN=64))


def test_overrides_accept_none_and_check_optional_types():
    cls = overrides.apply(
        Tiny, ["DIMS_PER_HEAD=None", "TARGET_LOG_PPLX=2", "EVAL_NUM_BATCHES=none"]
    )
    assert cls.DIMS_PER_HEAD is None and cls.TARGET_LOG_PPLX == 2.0 and cls.EVAL_NUM_BATCHES is None
    with pytest.raises(
        UsageError, match="bad value for DIMS_PER_HEAD: 'abc' is not an int or None"
    ):
        overrides.apply(Tiny, ["DIMS_PER_HEAD=abc"])
    assert overrides.apply(Tiny, ["TOKENIZER_PATH=2024"]).TOKENIZER_PATH == "2024"


def test_provenance_names_default_class_override_and_derived():
    cls = overrides.apply(registry.get("LmCloudSpmdTiny"), ["NUM_LAYERS=3"])
    sources = resolve(cls).sources
    assert sources["NUM_LAYERS"] == "--set"
    assert sources["SEQ_LEN"] == "class CpuSizedLm"
    assert sources["DATA_SOURCE"] == "class LmCloudSpmdTiny"
    assert sources["ACTIVATION"] == "class LmCloudSpmd"
    assert sources["OPTIMIZER"] == "class _SetDefaultAdam"
    assert sources["COMBINE_QKV"] == "class TransformerLmSpmdAdafactor"
    assert sources["LAYERNORM_EPSILON"] == "default"
    assert sources["DIMS_PER_HEAD"] == "derived: MODEL_DIMS // NUM_HEADS"
    assert sources["TRAINING_SEED"] == "derived: SEED"


def test_minus_one_takes_the_devices_left_over():
    cfg = config.MeshConfig(ici_mesh_shape=(1, -1, 2), dcn_mesh_shape=(2, 1, 1))
    assert mesh_lib.resolve(cfg, 8).ici_mesh_shape == (1, 2, 2)
    assert mesh_lib.mesh_shape(cfg, 8) == (2, 2, 2)
    assert mesh_lib.resolve(config.MeshConfig(ici_mesh_shape=(1, -1, 1)), 1).ici_mesh_shape == (
        1,
        1,
        1,
    )
    with pytest.raises(UsageError, match="the other axes take 4 devices, which does not divide"):
        mesh_lib.resolve(cfg, 6)


def test_tiny_experiments_fit_any_device_count():
    for name in ("LmCloudSpmdTiny", "C4SpmdTinyAdam1Replica"):
        assert -1 in registry.get(name).ICI_MESH_SHAPE
    run = instantiate(derive(Tiny, ICI_MESH_SHAPE=(1, -1, 1))(), devices=jax.devices()[:8])
    assert dict(run.mesh.shape) == {"replica": 1, "data": 8, "mdl": 1}
    assert run.task.mesh.ici_mesh_shape == (1, 8, 1)  # what config.json records
    assert run.global_batch == 8 * Tiny.PERCORE_BATCH_SIZE


PIPED = dict(
    MESH_AXIS_NAMES=("stage", "replica", "data", "mdl"),
    ICI_MESH_SHAPE=(2, 1, 2, 2),
    DCN_MESH_SHAPE=None,
    NUM_STAGES=2,
    PERCORE_BATCH_SIZE=2,
)


def test_microbatch_size_sets_the_microbatches_from_the_global_batch():
    # praxis LayerwiseShardablePipelined: num_microbatches = global batch // microbatch_size.
    run = instantiate(derive(Tiny, **PIPED, MICROBATCH_SIZE=4)())
    assert run.global_batch == 16 and run.task.mesh.num_microbatches == 4
    assert run.model.num_microbatches == 4
    with pytest.raises(UsageError, match="does not split into microbatches of MICROBATCH_SIZE=3"):
        instantiate(derive(Tiny, **PIPED, MICROBATCH_SIZE=3)())


def test_the_pipeline_experiment_runs_paxs_four_microbatches():
    """Pax's C4SpmdPipelineGpt3SmallAdam64Replicas: per-core batch 1 on 64 devices = 64 rows,
    MICROBATCH_SIZE 16 -> 4 microbatches; the GPipe bubble (S - 1) / (M + S - 1) = 3/7."""
    from pax.parallel.pipeline import bubble_fraction

    task = registry.get("C4SpmdPipelineGpt3SmallAdam64Replicas")().task()
    global_batch = task.train.percore_batch_size * 64
    assert global_batch // task.mesh.microbatch_size == 4
    assert bubble_fraction(task.mesh.num_stages, 4) == pytest.approx(3 / 7)


def test_whole_split_eval_covers_every_held_out_window_once():
    tokens = ByteTokenizer().encode(embedded_text())
    held_out = tokens[int(len(tokens) * (1 - EVAL_FRACTION)) :]
    ds = WindowDataset(held_out, 128, seed=0, whole=True)
    windows = (len(held_out) - 1) // 128
    assert ds.num_batches(16) == -(-windows // 16)
    seen = np.concatenate([ds.batch(i, 16)["targets"].ravel() for i in range(ds.num_batches(16))])
    weights = np.concatenate(
        [ds.batch(i, 16)["weights"].ravel() for i in range(ds.num_batches(16))]
    )
    assert weights.sum() == windows * 128
    np.testing.assert_array_equal(seen[weights > 0], held_out[1 : windows * 128 + 1])


def test_eval_num_batches_none_evaluates_the_whole_split(tmp_path):
    exp = derive(Tiny, EVAL_NUM_BATCHES=None, NUM_TRAIN_STEPS=3, EVAL_EVERY_N_STEPS=3)
    run = instantiate(exp(), devices=jax.devices()[:1])
    loop.train(run, str(tmp_path), "tests.Tiny")
    [row] = read_metrics(tmp_path, "eval_test_embedded")
    tokens = ByteTokenizer().encode(embedded_text())
    windows = (len(tokens) - int(len(tokens) * (1 - EVAL_FRACTION)) - 1) // Tiny.SEQ_LEN
    assert row["num_tokens"] == windows * Tiny.SEQ_LEN
    assert row["num_batches"] == -(-windows // Tiny.PERCORE_BATCH_SIZE)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["task"]["train"]["eval_num_batches"] is None


def test_target_log_pplx_stops_training_after_the_eval_that_reaches_it(tmp_path):
    exp = derive(Tiny, NUM_TRAIN_STEPS=6, EVAL_EVERY_N_STEPS=2, CHECKPOINT_EVERY_N_STEPS=5)
    # First eval at step 2: a fresh model's log-perplexity is about ln 256 ~ 5.5 < 9.
    loop.train(
        instantiate(derive(exp, TARGET_LOG_PPLX=9.0)(), devices=jax.devices()[:1]),
        str(tmp_path / "a"),
        "tests.Tiny",
    )
    assert [r["step"] for r in read_metrics(tmp_path / "a", "train")] == [1, 2]
    assert sorted(p.name for p in (tmp_path / "a" / "checkpoints").iterdir()) == [
        "checkpoint_00000002"
    ]
    # Out of reach: the run goes to NUM_TRAIN_STEPS.
    loop.train(
        instantiate(derive(exp, TARGET_LOG_PPLX=0.1)(), devices=jax.devices()[:1]),
        str(tmp_path / "b"),
        "tests.Tiny",
    )
    assert read_metrics(tmp_path / "b", "train")[-1]["step"] == 6


def test_data_seeds_follow_pax():
    c4 = registry.get("C4Spmd1BAdam4Replicas")()
    train, evaluation = base.datasets(c4.task())
    assert (train.seed, evaluation.seed) == (9876, 4321)  # paxml C4UnsupervisedDataset
    assert evaluation.whole_split  # reset_for_eval: the whole validation set, each evaluation
    tiny_train, tiny_eval = registry.get("LmCloudSpmdTiny")().datasets()
    assert (tiny_train.seed, tiny_eval.seed) == (1234, 0)


def test_every_registered_experiment_resolves_and_describes():
    from pax.experiments import describe

    for name in registry.names():
        text = describe.describe(registry.get(name), name)
        rows = [ln for ln in text.splitlines() if ln.startswith("  ")]
        assert len(rows) == len(config.PARAMS), name


def test_a_job_directory_from_before_a_new_hyper_parameter_resumes_at_its_default(tmp_path):
    """A config.json written before VOCAB_PAD_MULTIPLE existed: the same run at its default (no
    padding), a usage error at another value."""
    import json

    from pax.train import job_config, loop
    from pax.train.instantiate import instantiate

    run = instantiate(Tiny(), with_data=False)
    written = job_config.as_written(loop._config(run, "tests.Tiny"))
    del written["task"]["model"]["vocab_pad_multiple"]
    (tmp_path / job_config.FILE).write_text(json.dumps(written))
    job_config.check(str(tmp_path), loop._config(run, "tests.Tiny"))
    padded = instantiate(derive(Tiny, VOCAB_PAD_MULTIPLE=8)(), with_data=False)
    with pytest.raises(UsageError, match="task.model.vocab_pad_multiple is absent in its"):
        job_config.check(str(tmp_path), loop._config(padded, "tests.Tiny"))
