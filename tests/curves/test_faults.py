"""pax.curves.faults: each fault really breaks what it says, and nothing else."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pax import paths
from pax.curves import faults
from pax.models import transformer
from pax.train import step
from tests.helpers import Tiny, xla_flags

ROOT = str(paths.ROOT)


def _params(cfg):
    tokens = jnp.zeros((1, cfg.seq_len), jnp.int32)
    return jax.jit(transformer.TransformerLm(cfg).init)(jax.random.key(0), tokens)["params"]


def _param_shapes(cfg):
    """The parameters the model creates, as shapes: its init traced, no program compiled."""
    tokens = jax.ShapeDtypeStruct((1, cfg.seq_len), jnp.int32)
    return jax.eval_shape(transformer.TransformerLm(cfg).init, jax.random.key(0), tokens)["params"]


def test_no_final_norm_drops_that_norm_only(monkeypatch):
    cfg = Tiny().task().model
    healthy = _param_shapes(cfg)
    hits = []
    flags, how = faults.arguments("no_final_norm", [], hits, monkeypatch.setattr)
    broken = _param_shapes(cfg)
    assert flags == [] and "final_norm" in how and hits
    assert "final_norm" in healthy and "final_norm" not in broken
    assert set(healthy) - set(broken) == {"final_norm"}


def test_labels_shifted_trains_on_the_token_two_ahead(monkeypatch):
    original = step.lm_loss
    faults.arguments("labels_shifted", [], [], monkeypatch.setattr)
    logits = np.float32(np.random.RandomState(0).randn(2, 5, 7))
    targets = np.array([[1, 2, 3, 4, 5], [6, 5, 4, 3, 2]])
    weights = np.ones((2, 5), np.float32)
    # Jitted after the patch: each loss one program rather than one per op.
    loss, metrics = jax.jit(step.lm_loss)(logits, targets, weights)
    expected, _ = jax.jit(original)(
        logits,
        np.array([[2, 3, 4, 5, 5], [5, 4, 3, 2, 2]]),
        np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 0]], np.float32),
    )
    assert loss == pytest.approx(float(expected)) and metrics["num_tokens"] == 8


def test_causal_mask_dropped_lets_past_logits_see_the_future(monkeypatch):
    cfg = Tiny().task().model
    model = transformer.TransformerLm(cfg)
    params = _params(cfg)
    a = np.zeros((1, cfg.seq_len), np.int32)
    b = a.copy()
    b[0, -1] = 7  # only the last token differs

    def logits():
        """The first position's logits, jitted: a new program traced with the model as it is
        now (patched or not), run on both inputs."""
        first = jax.jit(lambda tokens: model.apply({"params": params}, tokens)[0, 0])
        return first(a), first(b)

    np.testing.assert_array_equal(*logits())  # healthy: causal
    hits = []
    flags, how = faults.arguments("causal_mask_dropped", [], hits, monkeypatch.setattr)
    assert flags == [] and "causal" in how
    assert not np.allclose(*logits())  # position 0 now sees the last token
    assert hits


def test_config_faults_are_set_overrides():
    argv = ["--exp=tasks.lm.params.lm_cloud.LmCloudSpmdTiny"]
    assert faults.arguments("lr_x10", argv, [])[0] == ["--set=LEARNING_RATE=0.03"]
    assert faults.arguments("lr_x10", [*argv, "--set=LEARNING_RATE=0.002"], [])[0] == [
        "--set=LEARNING_RATE=0.02"
    ]
    assert faults.arguments("lr_div10", argv, [])[0] == ["--set=LEARNING_RATE=0.0003"]
    assert faults.arguments("no_warmup", argv, [])[0] == ["--set=LR_WARMUP_STEPS=0"]


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "name one fault with --fault=NAME"),
        (["--fault=slow", "--job_log_dir=x"], "one of lr_x10, no_warmup"),
        (["--fault=lr_x10"], "--job_log_dir is required"),
    ],
)
def test_bad_input_one_line_exit_2(argv, message, capsys):
    assert faults.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


# Slow tier: a whole run through the command; the fast tier checks each fault's effect on the
# model above, and the command's refusals.
@pytest.mark.slow
def test_a_broken_run_end_to_end(tmp_path):
    """A few steps of the real trainer with the norm patched: the run trains, its config is
    the healthy one's, and fault.json says what was broken."""
    job = tmp_path / "job"
    small = [
        "NUM_LAYERS=1",
        "MODEL_DIMS=32",
        "HIDDEN_DIMS=64",
        "SEQ_LEN=16",
        "PERCORE_BATCH_SIZE=2",
        "NUM_TRAIN_STEPS=2",
        "EVAL_EVERY_N_STEPS=2",
        "EVAL_NUM_BATCHES=1",
        "CHECKPOINT_EVERY_N_STEPS=100",
    ]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pax.curves.faults",
            "--fault=no_final_norm",
            "--exp=tasks.lm.params.lm_cloud.LmCloudSpmdTiny",
            f"--job_log_dir={job}",
            *[f"--set={s}" for s in small],
        ],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": ROOT,
            "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": xla_flags(1),
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    fault = json.loads((job / "fault.json").read_text())
    assert fault["name"] == "no_final_norm" and "identity" in fault["how"]
    config = json.loads((job / "config.json").read_text())
    assert config["experiment"] == "tasks.lm.params.lm_cloud.LmCloudSpmdTiny"
    rows = [json.loads(x) for x in (job / "metrics.jsonl").read_text().splitlines()]
    assert {r["split"] for r in rows} == {"train", "eval_test_embedded"}
