"""Decoding reads the run it decodes (pax.decode.job): the experiment and the --set values come
from the job directory's config.json, said in one line; only a flag that contradicts them is
refused; a second decode of a step says that it replaces the first's file."""

import json

import pytest

from pax.decode import job as decode_job
from pax.errors import UsageError

TINY = "tasks.lm.params.lm_cloud.LmCloudSpmdTiny"
# tests.helpers.Tiny, which trained the session's tiny run, is the registered tiny experiment
# with these hyper-parameters changed (tests/decode/test_decode_main.py's TINY spells them).
TINY_SETS = {
    "NUM_LAYERS=2",
    "MODEL_DIMS=64",
    "HIDDEN_DIMS=128",
    "SEQ_LEN=32",
    "USE_ROTARY_POSITION_EMB=False",
    "WEIGHT_INIT=xavier",
    "WEIGHT_INIT_SCALE=1.000001",
}


@pytest.fixture
def job(tiny_job_copy):
    """The session's tiny run, as a run of the registered experiment with --set values records
    itself (the fixture trains it under the unregistered name tests.Tiny)."""
    path = tiny_job_copy / "config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "experiment": TINY}))
    return tiny_job_copy


def test_the_runs_experiment_and_sets_come_from_its_config(job):
    exp, sets, line = decode_job.experiment_and_sets(str(job), None, [])
    assert exp == TINY
    assert TINY_SETS <= set(sets)
    # the rest are the run's own lengths and cadences (NUM_TRAIN_STEPS=6, ...), nothing of the
    # mesh the devices resolved
    assert "NUM_TRAIN_STEPS=6" in sets and not any(s.startswith("ICI_MESH") for s in sets)
    assert line.startswith(f"decoding {job} as it was trained: --exp={TINY} --set ")
    assert "--set NUM_LAYERS=2" in line and line.endswith("(its config.json)")


def test_given_sets_come_after_the_runs_and_the_same_experiment_may_be_named(job):
    exp, sets, _ = decode_job.experiment_and_sets(str(job), "LmCloudSpmdTiny", ["REMAT_POLICY=x"])
    assert exp == TINY and sets[-1] == "REMAT_POLICY=x"


def test_another_experiment_is_refused(job):
    with pytest.raises(
        UsageError, match=rf"holds a run of {TINY}, not LmCloudSpmd2B; .*drop --exp"
    ):
        decode_job.experiment_and_sets(str(job), "LmCloudSpmd2B", [])


def test_a_run_it_cannot_name_needs_exp(tmp_path, tiny_job):
    # tests.Tiny is registered nowhere: decoding it takes --exp and --set as given
    assert decode_job.experiment_and_sets(str(tiny_job), TINY, ["A=1"]) == (TINY, ["A=1"], None)
    with pytest.raises(UsageError, match="give --exp and the --set values it was trained with"):
        decode_job.experiment_and_sets(str(tmp_path), None, [])


def test_decode_once_takes_the_run_from_its_job_dir(pax_main, job):
    """The quickstart's case: a run trained with --set NUM_LAYERS=2, decoded by its directory."""
    first = pax_main.run(f"--job_log_dir={job}", "--mode=decode_once", "--prompt=The for")
    assert first.returncode == 0, first.stderr[-3000:]
    said = [x for x in first.stderr.splitlines() if "as it was trained" in x]
    assert len(said) == 1 and "--set NUM_LAYERS=2" in said[0], first.stderr[-3000:]
    out = job / "decoder_out" / "prompts" / "decoder_out_6_shard_0.jsonl"
    assert out.is_file() and "replacing" not in first.stdout
    # As long as the first prompt: the same length to generate, so the same program (loaded
    # from the compilation cache).
    again = pax_main.run(f"--job_log_dir={job}", "--mode=decode_once", "--prompt=Tuples.")
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"-> {out} (replacing an earlier decode of this step)" in again.stdout
    assert [json.loads(x)["prompt"] for x in out.read_text().splitlines()] == ["Tuples."]


def test_a_contradicting_set_is_one_line_and_exit_2(pax_main, job):
    result = pax_main.run(
        f"--job_log_dir={job}", "--mode=decode_once", "--prompt=x", "--set=NUM_LAYERS=4"
    )
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "trained with num_layers 2 (now 4); drop the --set" in lines[0]
    assert not (job / "decoder_out").exists()
