"""The reference bands shipped in pax/curves/references/: well-formed, real, falling."""

import json

import pytest

from pax.curves import load_reference, reference_names
from pax.curves.reference import REFERENCES_DIR


def test_tiny_reference_is_shipped():
    assert "LmCloudSpmdTiny" in reference_names()


@pytest.mark.parametrize("name", reference_names())
def test_shipped_reference_is_well_formed_and_falls(name):
    ref = load_reference(name)  # recomputes the band from the runs; refuses a mismatch
    data = json.loads((REFERENCES_DIR / f"{name}.json").read_text())
    assert ref.experiment.rsplit(".", 1)[-1] == name
    assert len(ref.runs) >= 3
    assert len({r["seed"] for r in ref.runs}) == len(ref.runs)
    assert data["recorded_by"].startswith("./noxw -s references")
    for run in data["runs"]:
        assert run["command"].startswith("./noxw -s train --")
        assert f"--set=SEED={run['seed']}" in run["command"]
        assert len(run["lock_sha256"]) == 64 and run["release"]
        assert run["lockfile"].startswith("releases/")
    for split in ref.splits():
        for metric in ("loss", "log_pplx"):
            band = ref.band(split, metric)
            assert band is not None, (split, metric)
            assert all(lo <= hi for lo, hi in zip(band.lo, band.hi))
            assert band.steps == sorted(band.steps)
    assert "train" in ref.splits() and any(s.startswith("eval") for s in ref.splits())
    train = ref.band("train", "loss")
    assert len(train.steps) >= 10
    assert train.mean[0] > train.mean[-1] + 1.0  # it learns: from ~ln 256 to well below
    assert train.hi[-1] < train.lo[0]
