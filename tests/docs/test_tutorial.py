"""docs/tutorial.ipynb is stored with the outputs of a full run (`./noxw -s tutorial`), agrees
with the shipped reference band, and runs top to bottom (nbclient, a fresh kernel)."""

import json
import os
import re

import pytest

from pax.curves import load_reference
from pax.paths import ROOT

NOTEBOOK = ROOT / "docs" / "tutorial.ipynb"
NUMBER_WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "ten": 10, "twenty": 20}


def _cells():
    return json.loads(NOTEBOOK.read_text())["cells"]


def _output_text(cells) -> str:
    return "".join(
        "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
        for c in cells
        for o in c.get("outputs", [])
    )


def test_stored_with_the_outputs_of_a_full_run():
    code = [c for c in _cells() if c["cell_type"] == "code"]
    assert all(c.get("outputs") and c.get("execution_count") for c in code), (
        "store the notebook executed: ./noxw -s tutorial"
    )
    assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1))
    kinds = [o["output_type"] for c in code for o in c["outputs"]]
    assert "error" not in kinds
    images = [o for c in code for o in c["outputs"] if "image/png" in o.get("data", {})]
    assert len(images) == 1
    text = _output_text(code)
    assert "resumed from" in text and "step 150:" in text
    assert str(ROOT) not in text, "outputs name paths from the repository root"


def test_agrees_with_the_shipped_band():
    """Its seed count is the band's, and the stored verdict is the band's verdict."""
    ref = load_reference("LmCloudSpmdTiny")
    cells = _cells()
    text = _output_text(cells)
    assert f"band: {ref.n} seeds {ref.seeds()}" in text
    assert "INSIDE" in text
    prose = "".join("".join(c["source"]) for c in cells)
    for count in re.findall(r"\b(\w+) seeds\b", prose + text):
        number = NUMBER_WORDS.get(count.lower(), int(count) if count.isdigit() else None)
        assert number in (None, ref.n), f"'{count} seeds' where the band has {ref.n}"


@pytest.mark.slow
def test_tutorial_runs_top_to_bottom(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")  # the test layer of release 1.6.0 on
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")
    job = tmp_path / "tutorial"
    monkeypatch.setenv("PAX_TUTORIAL_JOB", str(job))
    # The tutorial runs the experiment on its one CPU device, as a reader's machine would; the
    # test suite's 8 virtual devices (conftest) are not passed on.
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=1800,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT / "docs")}},
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on failure

    assert sorted(os.listdir(job / "checkpoints"))[-1] == "checkpoint_00000150"
    images = [
        o for c in notebook.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})
    ]
    assert len(images) == 1
    for step in (100, 150):
        path = job / "decoder_out" / "embedded" / f"decoder_out_{step}_shard_0.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines()]
        assert len(records) == 3 and all(r["completion_tokens"] == 80 for r in records)
    text = "".join(
        o.get("text", "") for c in notebook.cells for o in c.get("outputs", []) if o.get("name")
    )
    assert "resumed from" in text and "step 150:" in text
    ref = load_reference("LmCloudSpmdTiny")
    assert f"band: {ref.n} seeds" in text
