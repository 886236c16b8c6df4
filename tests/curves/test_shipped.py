"""The references shipped in pax/curves/references/: well-formed, real, and their verdict
calibrated: every held-out seed passes, every broken run fails."""

import json

import pytest

from pax.curves import judge_recorded, load_reference, reference_names
from pax.curves.reference import REFERENCES_DIR


def test_tiny_reference_is_shipped():
    assert "LmCloudSpmdTiny" in reference_names()


@pytest.mark.parametrize("name", reference_names())
def test_shipped_reference_is_well_formed_and_falls(name):
    ref = load_reference(name)  # recomputes the checks from the runs; refuses a mismatch
    data = json.loads((REFERENCES_DIR / f"{name}.json").read_text())
    experiment, _, platform = name.partition(".")  # `<Experiment>[.<platform>]`
    assert ref.experiment.rsplit(".", 1)[-1] == experiment
    assert len(set(ref.seeds())) == ref.n >= 3
    assert data["recorded_by"].startswith("./noxw -s references")
    for run in data["runs"]:
        assert run["command"].startswith("./noxw -s train --")
        assert f"--set=SEED={run['seed']}" in run["command"]
        assert len(run["lock_sha256"]) == 64 and run["release"]
        assert run["lockfile"].startswith("releases/")
        assert run["devices"]["platform"] == (platform or "cpu")  # recorded where it says
    assert ref.config["task.optimizer.learning_rate"] > 0
    windows = [s for s in ref.stats if s.check.split == "train"]
    evals = [s for s in ref.stats if s.check.split.startswith("eval")]
    assert len(windows) >= 3 and len(evals) >= 3
    assert windows[0].mean > windows[-1].mean + 0.5  # it learns
    assert all(s.std > 0 for s in ref.stats)


def test_tiny_reference_is_calibrated_as_issue_19_asks():
    """At least 10 seeds, three held-out seeds (one of them the README's default run, SEED
    1234) and one run of each fault that breaks the tiny run (`references`'s default set, four
    of pax.curves.faults's six), at the band's length."""
    from pax.curves.band import FAULTS

    ref = load_reference("LmCloudSpmdTiny")
    assert ref.n >= 10 and ref.alpha <= 0.01
    held = ref.calibration["held_out"]
    assert len(held) >= 3 and 1234 in [e["seed"] for e in held]
    broken = ref.calibration["broken"]
    assert sorted(e["fault"]["name"] for e in broken) == sorted(FAULTS) and len(FAULTS) >= 4
    length = ref.config["task.train.num_train_steps"]
    assert all(e["num_train_steps"] == length for e in [*held, *broken])
    assert all(" -m pax.curves.faults " in e["command"] for e in broken)


CALIBRATION = [
    (name, kind, i)
    for name in reference_names()
    for kind, runs in load_reference(name).calibration.items()
    for i in range(len(runs))
]


@pytest.mark.parametrize("name, kind, i", CALIBRATION)
def test_calibration_run_is_judged_right(name, kind, i):
    ref = load_reference(name)
    entry = ref.calibration[kind][i]
    verdict = judge_recorded(entry, ref)
    if kind == "held_out":
        assert verdict.ok, verdict.report
        assert entry["seed"] not in ref.seeds()
    else:
        assert kind == "broken" and entry["fault"]["name"]
        assert verdict.code == 1, verdict.report


def test_the_tpu_band_was_trained_on_a_tpu_with_every_pin_of_its_lock():
    """LmCloudSpmdTiny.tpu: ten seeds on a TPU chip, in an environment holding every pin of the
    release's tpu lock (read from the lockfile itself) with the other packages it had named,
    and the README's default seed held out and inside."""
    from pax.lockfile import lock_versions
    from pax.paths import ROOT

    ref = load_reference("LmCloudSpmdTiny.tpu")
    data = json.loads((REFERENCES_DIR / "LmCloudSpmdTiny.tpu.json").read_text())
    assert ref.n >= 10 and ref.alpha <= 0.01
    for run in data["runs"]:
        assert run["devices"]["device_kind"].startswith("TPU")
        pins = lock_versions((ROOT / run["lockfile"]).read_text(), run["lockfile"])
        assert all(pins[name] == v for name, v in run["headline_packages"].items()), run["seed"]
        assert run["env_state"] in ("exact", "superset")
        assert (run["env_state"] == "superset") == bool(run.get("other_packages"))
        assert not set(run.get("other_packages", {})) & set(pins)
    assert 1234 in [e["seed"] for e in ref.calibration["held_out"]]
