"""Drawing (only where matplotlib is installed: the tools venv and the test env)."""

import pytest

from pax.curves import CurvesError, load_reference, plot
from pax.curves.cli import main

pytest.importorskip("matplotlib")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_plot_runs_over_band(tmp_path, make_run, reference_file):
    out = plot(
        [make_run("a", seed=2), make_run("b", seed=4, shift=0.3)],
        tmp_path / "c.png",
        reference=load_reference(reference_file),
    )
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert [p.name for p in tmp_path.glob(".*tmp")] == []


def test_plot_without_reference(tmp_path, make_run):
    out = plot([make_run("a")], tmp_path / "c.png")
    assert out.stat().st_size > 1000


def test_plot_bad_output(tmp_path, make_run):
    with pytest.raises(CurvesError, match="must be a .png"):
        plot([make_run("a")], tmp_path / "c.svg")
    with pytest.raises(CurvesError, match="no such directory"):
        plot([make_run("a")], tmp_path / "nodir" / "c.png")


def test_cli_plot(tmp_path, make_run, reference_file, capsys):
    out = tmp_path / "x.png"
    argv = ["plot", str(make_run("a")), "--out", str(out), "--reference", str(reference_file)]
    assert main(argv) == 0
    assert out.read_bytes()[:8] == PNG_MAGIC and "band: reference Tiny" in capsys.readouterr().out


def test_cli_calibration_chart(tmp_path, reference_file, capsys):
    out = tmp_path / "cal.png"
    assert main(["calibration", str(reference_file), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG_MAGIC and f"wrote {out}" in capsys.readouterr().out
