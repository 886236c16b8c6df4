"""`python -m pax.main --mode=decode_once|decode` end to end, and its bad-input contract."""

import json
import os
import subprocess
import sys
import time

import jax
import pytest

from pax import paths
from pax.decode import decoder as decoder_lib
from pax.decode.options import Options
from pax.decode.sampling import Sampling
from pax.errors import UsageError
from pax.train.instantiate import instantiate
from tests.helpers import Tiny, derive, xla_flags

ROOT = str(paths.ROOT)
# tests.helpers.Tiny as --set overrides of the registered tiny experiment.
TINY = [
    "--exp=LmCloudSpmdTiny",
    "--set=NUM_LAYERS=2",
    "--set=MODEL_DIMS=64",
    "--set=HIDDEN_DIMS=128",
    "--set=SEQ_LEN=32",
    "--set=USE_ROTARY_POSITION_EMB=False",
    "--set=WEIGHT_INIT=xavier",
    "--set=WEIGHT_INIT_SCALE=1.000001",
]
# What the decoding runs decode: one shape bucket and length, so one generator program, which
# the runs after the first load from the compilation cache.
PROMPTS = ["--prompt=The list", "--prompt=Dictionaries are mutable", "--max_new_tokens=5"]
SHORT_RUN = [
    "--set=PERCORE_BATCH_SIZE=8",
    "--set=SUMMARY_EVERY_N_STEPS=3",
    "--set=EVAL_EVERY_N_STEPS=3",
    "--set=EVAL_NUM_BATCHES=1",
    "--set=CHECKPOINT_EVERY_N_STEPS=3",
    "--set=NUM_TRAIN_STEPS=6",
]


def _start(*args):
    env = {
        **os.environ,
        "PYTHONPATH": ROOT,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": xla_flags(1),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "pax.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


@pytest.fixture
def trained(tiny_job):
    """Tiny trained 6 steps on one device: checkpoints at steps 3 and 6 (read only)."""
    return tiny_job


@pytest.fixture
def job(tiny_job_copy):
    """A copy of the trained job directory, for a test to write its decoder outputs into."""
    return tiny_job_copy


def _records(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_decode_once_prints_and_writes_continuations(pax_main, job):
    result = pax_main.run(
        *TINY,
        f"--job_log_dir={job}",
        "--mode=decode_once",
        *PROMPTS,
    )
    assert result.returncode == 0, result.stderr
    out = job / "decoder_out" / "prompts" / "decoder_out_6_shard_0.jsonl"
    assert result.stdout.startswith(f"checkpoint_00000006, greedy: 2 prompt(s) -> {out}")
    records = _records(out)
    assert [r["prompt"] for r in records] == ["The list", "Dictionaries are mutable"]
    for r in records:
        assert r["step"] == 6 and r["prompt_tokens"] == len(r["prompt"])
        assert r["completion_tokens"] == 5 and r["stop"] == "max_new_tokens"
        assert r["sampling"] == {"method": "greedy", "temperature": 1.0, "top_k": 0, "top_p": 1.0}
        assert r["completion"] in result.stdout


# Slow tier: two more runs; sampling and the decode set are the fast tier's in test_sampling and
# test_prompts, decode_once end to end in the test above.
@pytest.mark.slow
def test_decode_once_samples_the_experiments_decode_set(pax_main, job, tmp_path):
    args = [*TINY, f"--job_log_dir={job}", "--mode=decode_once", "--num_prompts=3"]
    args += ["--max_new_tokens=6", "--sampling=sample", "--top_k=20", "--decode_seed=5"]
    first = pax_main.run(*args)
    assert first.returncode == 0, first.stderr
    path = job / "decoder_out" / "embedded" / "decoder_out_6_shard_0.jsonl"
    records = _records(path)
    assert len(records) == 3 and all(r["completion_tokens"] == 6 for r in records)
    assert records[0]["sampling"]["top_k"] == 20 and records[0]["seed"] == 5
    # The same seed draws the same tokens; the file is rewritten whole.
    assert pax_main.run(*args).returncode == 0
    assert _records(path) == records


# Slow tier: three runs at once; the fast tier's decode mode is the two tests below.
@pytest.mark.slow
def test_decode_follows_checkpoints_as_training_writes_them(pax_main, tmp_path):
    job = tmp_path / "job"
    follower = _start(
        *TINY,
        *SHORT_RUN,
        f"--job_log_dir={job}",
        "--mode=decode",
        "--prompt=Tuples",
        "--max_new_tokens=3",
        "--decode_poll_s=0.2",
        "--decode_wait_s=300",
    )
    try:
        first = pax_main.run(*TINY, *SHORT_RUN, "--set=NUM_TRAIN_STEPS=3", f"--job_log_dir={job}")
        assert first.returncode == 0, first.stderr
        out = job / "decoder_out" / "prompts"
        deadline = time.monotonic() + 300
        while not (out / "decoder_out_3_shard_0.jsonl").exists():
            assert follower.poll() is None, follower.communicate()
            assert time.monotonic() < deadline, "step 3 was not decoded"
            time.sleep(0.5)
        second = pax_main.run(*TINY, *SHORT_RUN, f"--job_log_dir={job}")  # resumes to step 6
        assert second.returncode == 0, second.stderr
        _, stderr = follower.communicate(timeout=300)
    finally:
        follower.kill()
    assert follower.returncode == 0, stderr
    # Step 6 is NUM_TRAIN_STEPS: the follower stops after it.
    assert sorted(os.listdir(out)) == ["decoder_out_3_shard_0.jsonl", "decoder_out_6_shard_0.jsonl"]
    assert _records(out / "decoder_out_6_shard_0.jsonl")[0]["step"] == 6


def test_decode_skips_what_it_decoded_before_and_stops_at_the_last_step(pax_main, job):
    args = [*TINY, *SHORT_RUN, f"--job_log_dir={job}", "--mode=decode", *PROMPTS]
    args += ["--decode_poll_s=0.1"]
    assert pax_main.run(*args).returncode == 0
    out = job / "decoder_out" / "prompts" / "decoder_out_6_shard_0.jsonl"
    written = out.stat().st_mtime_ns
    again = pax_main.run(*args)
    assert again.returncode == 0 and "decoded before" in again.stderr
    assert out.stat().st_mtime_ns == written


def test_decode_gives_up_waiting_after_decode_wait_s(pax_main, tmp_path):
    result = pax_main.run(
        *TINY,
        f"--job_log_dir={tmp_path / 'job'}",
        "--mode=decode",
        "--prompt=x",
        "--decode_poll_s=0.1",
        "--decode_wait_s=0.5",
    )
    assert result.returncode == 1
    assert "no new checkpoint in" in result.stderr and "--decode_wait_s" in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--prompt=" + "x" * 33], "prompt 0 is 33 tokens, longer than SEQ_LEN=32"),
        (["--set=VOCAB_SIZE=300"], "trained with vocab_size 256 (now 300)"),
        (["--sampling=beam"], "value should be one of"),
        (["--top_p=1.5"], "top_p 1.5 must be in (0, 1]"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(pax_main, job, args, message):
    result = pax_main.run(*TINY, f"--job_log_dir={job}", "--mode=decode_once", *args)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pax: error: ") and message in lines[0], lines[0]
    assert not (job / "decoder_out").exists()


@pytest.mark.parametrize(
    "attrs, options, message",
    [
        (dict(ACTIVATION="relu"), {}, "activation 'gelu' (now 'relu')"),
        (dict(USE_REPEATED_LAYER=False), {}, "use_repeated_layer True (now False)"),
        ({}, dict(sampling=Sampling("sample", 0.0)), "temperature 0.0 must be > 0"),
        ({}, dict(sampling=Sampling("sample", top_k=1000)), "top_k 1000 must be in 0..256"),
        ({}, dict(max_new_tokens=0), "--max_new_tokens (0)"),
        ({}, dict(prompts_file="/nonexistent/prompts.txt"), "no such file"),
        ({}, dict(prompts=("",)), "prompt 0 is empty"),
    ],
)
def test_more_bad_input_is_a_usage_error_before_anything_runs(trained, attrs, options, message):
    run = instantiate(derive(Tiny, **attrs)(), devices=jax.devices()[:1], with_data=False)
    with pytest.raises(UsageError) as e:
        decoder_lib.Decoder(run, str(trained), Options(**{"prompts": ("x",), **options}), True)
    assert message in str(e.value)
    assert not (trained / "decoder_out").exists()


def test_no_checkpoint_is_a_usage_error_and_creates_nothing(pax_main, tmp_path):
    job = tmp_path / "job"
    result = pax_main.run(*TINY, f"--job_log_dir={job}", "--mode=decode_once", "--prompt=x")
    assert result.returncode == 2, result.stderr
    assert f"no checkpoint in {job}/checkpoints; train first" in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1
    assert not job.exists()
