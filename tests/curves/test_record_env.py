"""The band recorder takes runs whose environment holds every pin of a release's lock, noting
the other packages there, and refuses runs whose pins differ or that name no lock."""

import json

import pytest

from pax import envinfo, lockfile
from pax.curves import record
from pax.curves.job_dir import CurvesError
from pax.releases import catalog as releases
from pax.train import manifest as manifest_lib

# The newest: of releases that share a lock's set, the newest names an env holding it.
RELEASE = releases.newest().version


def _with_env(job_dir, have):
    """job_dir's manifest.json as the trainer writes it where `have` is installed (no identity
    file): the environment's description, the lock it names, one segment."""
    env = envinfo.describe(environ={}, prefix=job_dir, have=have)
    path = job_dir / "manifest.json"
    described = {**json.loads(path.read_text()), **manifest_lib.release_info(env), "env": env}
    described["mesh"], described["peak_flops"], described["python"] = {}, {}, "3.11"
    described["xla_flags"] = {"XLA_FLAGS": None, "LIBTPU_INIT_ARGS": None}
    segment = manifest_lib.segment(described, "train", 0)
    path.write_text(json.dumps({**described, "segments": [segment]}))
    return env


def _locked():
    return lockfile.lock_versions(releases.resolve(RELEASE).lockfile("tpu").read_text())


def test_every_pin_and_other_packages_is_recorded_with_the_others(tmp_path, make_run):
    job = make_run("seed1")
    env = _with_env(job, {**_locked(), "pytest": "9.0.1", "pluggy": "1.6.0"})
    assert env["state"] == "superset"
    entry, _, _ = record._entry(record.Recorded(job, "train"), tmp_path)
    assert entry["release"] == RELEASE
    assert entry["lock_sha256"] == releases.resolve(RELEASE).lock_sha256("tpu")
    assert entry["env_state"] == "superset"
    assert entry["other_packages"] == {"pluggy": "1.6.0", "pytest": "9.0.1"}


def test_an_exact_environment_is_recorded_as_exact(tmp_path, make_run):
    job = make_run("seed1")
    _with_env(job, dict(_locked()))
    entry, _, _ = record._entry(record.Recorded(job, "train"), tmp_path)
    assert entry["env_state"] == "exact" and "other_packages" not in entry


@pytest.mark.parametrize(
    "change, state, words",
    [
        ({"numpy": "2.4.5"}, "unpinned", "numpy"),  # the machine's own numpy: no lock named
        ({"numpy": None}, "unpinned", "numpy"),
    ],
)
def test_a_run_whose_pins_differ_is_refused(tmp_path, make_run, change, state, words):
    job = make_run("seed1")
    have = {**_locked(), "pytest": "9.0.1", **change}
    _with_env(job, {k: v for k, v in have.items() if v is not None})
    with pytest.raises(CurvesError, match=rf"its environment is {state} \(.*{words}.*\); a "):
        record._entry(record.Recorded(job, "train"), tmp_path)


def test_a_pinned_env_with_a_pin_changed_is_refused_as_drifted(tmp_path, make_run):
    job = make_run("seed1")
    release = releases.resolve(RELEASE)
    ident = envinfo.Identity(
        RELEASE, "tpu", str(release.lockfile("tpu")), release.lock_sha256("tpu"), "3.11", _locked()
    )
    (job / envinfo.IDENTITY_FILE).write_text(ident.to_json())  # describe's prefix is job_dir
    _with_env(job, {**_locked(), "numpy": "2.4.5"})
    with pytest.raises(
        CurvesError, match=rf"drifted \(1 differences from release {RELEASE} tpu: numpy"
    ):
        record._entry(record.Recorded(job, "train"), tmp_path)
