"""A job directory's manifest.json is its history: every environment that trained it, from the
step it started at, and never one environment's steps relabelled as another's.

The other release is named the way a run names its own environment, by PAX_RELEASE and
PAX_LOCKFILE (pax.envinfo), with that release's real lockfile: the check reads what a run of
that release would record.
"""

import json
import logging
import os

import jax
import pytest

from pax.errors import UsageError
from pax.train import loop, manifest
from pax.train.instantiate import instantiate
from tests.checkpoint.test_resume import ROOT, _snapshot
from tests.helpers import OTHER, Tiny, derive, read_metrics, refusal, train

PAX = os.path.join(ROOT, "pax")


@pytest.fixture
def other_release(monkeypatch):
    lockfile = os.path.join(ROOT, "releases", OTHER, "cpu.txt")
    monkeypatch.setenv("PAX_RELEASE", OTHER)
    monkeypatch.setenv("PAX_PLATFORM", "cpu")
    monkeypatch.setenv("PAX_LOCKFILE", lockfile)
    return lockfile


def _manifest(job_dir) -> dict:
    return json.loads((job_dir / "manifest.json").read_text())


def test_a_new_run_is_one_segment_from_step_0(tiny_job):
    m = _manifest(tiny_job)
    [segment] = m["segments"]
    assert segment["mode"] == "train" and segment["from_step"] == 0
    assert (segment["release"], segment["lock_sha256"]) == (m["release"], m["lock_sha256"])
    assert segment["devices"] == m["devices"] and segment["env_state"] == m["env"]["state"]


def test_resuming_under_another_release_is_refused_naming_both(tiny_job_copy, other_release):
    job = tiny_job_copy
    before, ours = _snapshot(job), _manifest(job)
    assert refusal(job, derive(Tiny, NUM_TRAIN_STEPS=7)) == (
        f"{job} was trained up to step 6 on {manifest.name(ours['segments'][0])}; this is "
        f"release {OTHER} cpu (lock {_sha(other_release)[:12]}); nothing was changed. Resume "
        f"it on release {ours['release']} cpu, use a new --job_log_dir, or add "
        "--allow_env_change to continue it here (recorded in its manifest.json as a new segment)"
    )
    assert _snapshot(job) == before


def test_allowed_it_trains_on_as_a_second_segment(tiny_job_copy, other_release):
    job = tiny_job_copy
    first = _manifest(job)
    train(job, derive(Tiny, NUM_TRAIN_STEPS=7), allow_env_change=True)
    m = _manifest(job)
    # The top level still names the environment that started the run: nothing relabelled.
    assert {k: m[k] for k in ("release", "lock_sha256")} == {
        k: first[k] for k in ("release", "lock_sha256")
    }
    assert m["segments"][0] == first["segments"][0]
    second = m["segments"][1]
    assert (second["mode"], second["from_step"], second["release"]) == ("train", 6, OTHER)
    assert second["lock_sha256"] == _sha(other_release)
    assert [r["step"] for r in read_metrics(job)][6:] == [7]
    # Resumed again in the same environment: still two segments.
    train(job, derive(Tiny, NUM_TRAIN_STEPS=8), allow_env_change=True)
    assert len(_manifest(job)["segments"]) == 2


def test_a_finished_run_says_nothing_to_do_and_changes_nothing(tiny_job_copy, caplog):
    before = _snapshot(tiny_job_copy)
    with caplog.at_level(logging.INFO):
        assert train(tiny_job_copy) == {}
    [line] = [r.getMessage() for r in caplog.records if r.pathname.startswith(PAX)]
    assert line == (
        f"{tiny_job_copy} is finished (checkpoint at step 6, NUM_TRAIN_STEPS=6): nothing to do; "
        "a larger NUM_TRAIN_STEPS (--set) trains it further"
    )
    assert _snapshot(tiny_job_copy) == before


def test_a_finished_run_under_another_release_is_refused_then_has_nothing_to_do(
    tiny_job_copy, other_release
):
    before = _snapshot(tiny_job_copy)
    with pytest.raises(UsageError, match="was trained up to step 6 on release"):
        train(tiny_job_copy)
    assert train(tiny_job_copy, allow_env_change=True) == {}
    assert _snapshot(tiny_job_copy) == before


def test_evaluating_under_another_release_is_refused(tiny_job_copy, other_release):
    run = instantiate(Tiny(), devices=jax.devices()[:1])
    before = _snapshot(tiny_job_copy)
    with pytest.raises(UsageError, match="--allow_env_change"):
        loop.evaluate(run, str(tiny_job_copy), "tests.Tiny")
    assert _snapshot(tiny_job_copy) == before
    loop.evaluate(run, str(tiny_job_copy), "tests.Tiny", allow_env_change=True)
    segments = _manifest(tiny_job_copy)["segments"]
    assert [(s["mode"], s["from_step"], s["release"]) for s in segments][1:] == [("eval", 6, OTHER)]


def test_a_manifest_from_before_segments_reads_as_one_segment_from_0():
    old = {"release": "1.4.0", "lock_sha256": "ab" * 32, "devices": {"platform": "tpu"}}
    [segment] = manifest.segments(old)
    assert (segment["from_step"], segment["release"], segment["platform"]) == (0, "1.4.0", "tpu")


def _sha(path) -> str:
    import hashlib

    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
