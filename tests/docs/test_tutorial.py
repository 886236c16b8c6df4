"""docs/tutorial.ipynb runs top to bottom (nbclient, a fresh kernel in this environment)."""

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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
    notebook = nbformat.read(ROOT / "docs" / "tutorial.ipynb", as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), (
        "commit the notebook without outputs"
    )
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
