"""Pax's reference experiments compile for their real meshes, at real size, on CPU; README's
table is what docs/aot.json says."""

import json
import os
import subprocess
import sys

import pytest

from pax import aot
from pax.experiments import registry
from pax.releases import readme

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPECTED_TO_FIT = [n for n in registry.pax_references() if n not in aot.EXPECTED_NOT_TO_FIT]


def _aot(out, *experiments):
    """`python -m pax.aot EXP... --json OUT` as a user runs it (it makes its own devices)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    result = subprocess.run(
        [sys.executable, "-m", "pax.aot", *experiments, "--json", str(out)],
        cwd=ROOT,
        env={**env, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {r["experiment"].rsplit(".", 1)[1]: r for r in json.loads(out.read_text())}


def test_the_tiny_experiment_compiles_for_its_mesh_and_reports_its_plan(tmp_path):
    (row,) = _aot(tmp_path / "aot.json", "tasks.lm.params.lm_cloud.LmCloudSpmdTiny").values()
    assert row["params"] > 0 and row["devices"] >= 1 and row["fits"]
    assert 0 < row["per_device_bytes"] <= 32 * 2**30
    assert set(row["mesh"]) == {"replica", "data", "mdl"}


# Slow tier: every reference experiment at full size (minutes); the fast tier compiles the tiny
# experiment the same way above.
@pytest.mark.slow
def test_reference_experiments_compile_at_full_size_and_fit(tmp_path):
    rows = _aot(tmp_path / "aot.json", *EXPECTED_TO_FIT)
    # The names promise 1B and 2B parameters; counted abstractly, within 15%.
    assert rows["C4Spmd1BAdam4Replicas"]["params"] == pytest.approx(1e9, rel=0.15)
    assert rows["LmCloudSpmd2BLimitSteps"]["params"] == pytest.approx(2e9, rel=0.15)
    for name in ("C4Spmd1BAdam4Replicas", "LmCloudSpmd2BLimitSteps"):
        assert rows[name]["devices"] == 4
        assert rows[name]["mesh"] == {"replica": 1, "data": 4, "mdl": 1}
    pmapped = rows["LmCloudTransformerAdamLimitSteps"]
    assert pmapped["strategy"] == "pmap" and pmapped["devices"] == 4  # Pax ran it on a v4-8
    piped = rows["C4SpmdPipelineGpt3SmallAdam64Replicas"]
    assert piped["devices"] == 64
    assert piped["mesh"] == {"stage": 4, "replica": 1, "data": 4, "mdl": 4}
    # Pax: 64 rows (per-core batch 1) in microbatches of MICROBATCH_SIZE=16: 4 microbatches.
    assert piped["pipeline"] == {"stages": 4, "microbatches": 4, "bubble_fraction": 3 / 7}
    # README's table (docs/aot.json) is what this command measures: same parameter counts, and
    # per-device memory within 10% (XLA's plan moves a little with the host CPU's features).
    recorded = {
        r["experiment"].rsplit(".", 1)[1]: r
        for r in json.loads(open(os.path.join(ROOT, "docs", "aot.json")).read())
    }
    for name, r in rows.items():
        assert 0 < r["per_device_bytes"] <= 32 * 2**30 and r["fits"]
        assert r["params"] == recorded[name]["params"]
        assert r["per_device_bytes"] == pytest.approx(recorded[name]["per_device_bytes"], rel=0.1)


def test_readme_aot_table_is_rendered_from_docs_aot_json():
    text = (aot.ROOT / "README.md").read_text()
    blocks = readme.blocks(text, aot.START, aot.END)
    assert len(blocks) == 1, "README.md needs one aot-table block"
    assert blocks[0] == f"\n\n{aot.recorded_table()}\n\n", (
        "README's compile table differs from docs/aot.json; run ./noxw -s aot (or readme)"
    )


def test_aot_table_rows():
    row = {
        "experiment": "tasks.lm.params.c4.X",
        "params": 2.88e9,
        "strategy": "spmd",
        "mesh": {"stage": 4, "data": 4},
        "devices": 16,
        "per_device_bytes": 3 * 2**30,
        "fits": True,
        "compile_s": 29.4,
        "pipeline": {"stages": 4, "microbatches": 16, "bubble_fraction": 3 / 19},
    }
    lines = aot.render_table([row, {**row, "pipeline": False, "fits": False}]).splitlines()
    assert lines[2] == (
        "| X | 2.88B | spmd: stage 4, data 4 (4 stages × 16 microbatches, "
        "bubble 15.8%) | 16 | 3.0 GiB | fits | 29 s |"
    )
    assert (
        lines[3] == "| X | 2.88B | spmd: stage 4, data 4 | 16 | 3.0 GiB | not by this plan | 29 s |"
    )
