"""pax.curves without matplotlib: reading, bands, compare, the CLI's exit statuses."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from pax.curves import (
    CurvesError,
    Tolerance,
    compare,
    load_reference,
    make_band,
    read_metrics,
    read_run,
)
from pax.curves.__main__ import main
from tests.curves.conftest import EVAL, curve

ROOT = Path(__file__).resolve().parents[2]


def test_imports_without_jax_numpy_or_matplotlib():
    code = (
        "import sys, pax.curves, pax.curves.__main__, pax.curves.record; "
        "bad = [m for m in ('jax', 'numpy', 'matplotlib') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


# --- reading ---------------------------------------------------------------------------------


def test_dedupe_after_resume_keeps_last_row(make_run):
    rows = [{"split": "train", "step": s, "loss": 5.0 - s / 100} for s in (0, 10, 20, 30)]
    # killed after 30, resumed from the step-10 checkpoint: 20 and 30 are trained again
    rows += [{"split": "train", "step": s, "loss": 9.0 + s} for s in (20, 30, 40)]
    job = make_run(rows=rows)
    curves, skipped = read_metrics(job / "metrics.jsonl")
    assert skipped == 0
    assert curves["train"]["loss"] == {0: 5.0, 10: 4.9, 20: 29.0, 30: 39.0, 40: 49.0}
    assert list(curves["train"]["loss"]) == [0, 10, 20, 30, 40]


def test_cut_off_last_line_and_junk_are_skipped(make_run):
    rows = [
        {"split": "train", "step": 0, "loss": 5.0},
        "[1, 2]",
        {"step": 3, "loss": 1.0},
        {"split": "train", "step": "x", "loss": 1.0},
        {"split": "train", "step": True},
        {"split": "train", "step": 10, "loss": 4.0, "note": "text", "flag": True},
        '{"split": "train", "step": 20, "lo',
    ]
    run = read_run(make_run(rows=rows))
    assert run.curves == {"train": {"loss": {0: 5.0, 10: 4.0}}}
    assert run.skipped_lines == 5
    assert run.seed == 1 and run.experiment.endswith("LmCloudSpmdTiny")


def test_nan_is_kept(make_run):
    job = make_run(rows=['{"split": "train", "step": 0, "loss": NaN}'])
    assert math.isnan(read_run(job).curves["train"]["loss"][0])


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda p: p / "absent", "no such job directory"),
        (lambda p: (p / "file").write_text("x") and p / "file", "not a directory"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "no metrics.jsonl"),
        (
            lambda p: (
                ((p / "blank").mkdir(), (p / "blank" / "metrics.jsonl").write_text("\n"))
                and p / "blank"
            ),
            "no metric rows",
        ),
    ],
)
def test_bad_job_dirs(tmp_path, setup, message):
    with pytest.raises(CurvesError, match=message):
        read_run(setup(tmp_path))


# --- bands ------------------------------------------------------------------------------------


def test_band_minmax_and_std(make_run):
    curves = [read_run(make_run(f"s{s}", seed=s)).curves for s in (1, 2, 3)]
    bands = make_band(curves)
    band = bands[("train", "loss")]
    assert band.steps == list(range(0, 151, 10))
    assert band.lo[0] == pytest.approx(curve(0, 1)) and band.hi[0] == pytest.approx(curve(0, 3))
    assert band.mean[0] == pytest.approx(curve(0, 2))
    assert bands[(EVAL, "log_pplx")].steps == [50, 100, 150]
    assert ("train", "accuracy") not in bands and ("train", "grad_norm") not in bands
    std = make_band(curves, kind="std", k=2.0)[("train", "loss")]
    # values c+0.02, c+0.04, c+0.06: sample std 0.02
    assert std.hi[5] - std.mean[5] == pytest.approx(0.04)
    assert std.mean[5] - std.lo[5] == pytest.approx(0.04)
    # residuals -0.02, 0, +0.02 at each of 16 steps, 2 degrees of freedom per step
    assert band.sigma == pytest.approx(0.02)
    assert bands[(EVAL, "loss")].sigma == pytest.approx(0.02)


def test_band_uses_steps_all_runs_share(make_run):
    a = read_run(make_run("a", steps=range(0, 151, 10))).curves
    b = read_run(make_run("b", seed=2, steps=range(0, 101, 10), eval_steps=(50, 100))).curves
    bands = make_band([a, b])
    assert bands[("train", "loss")].steps == list(range(0, 101, 10))
    assert bands[(EVAL, "loss")].steps == [50, 100]


def test_band_refuses_bad_runs(make_run):
    nan_run = read_run(make_run(rows=['{"split": "train", "step": 0, "loss": NaN}'])).curves
    with pytest.raises(CurvesError, match="not finite"):
        make_band([nan_run])
    with pytest.raises(CurvesError, match="band kind"):
        make_band([nan_run], kind="median")
    with pytest.raises(CurvesError, match="at least one run"):
        make_band([])


def test_reference_round_trip(reference_file):
    ref = load_reference(reference_file)
    data = json.loads(reference_file.read_text())
    assert ref.name == "Tiny" and len(ref.runs) == 3
    assert [r["seed"] for r in data["runs"]] == [1, 2, 3]
    assert data["runs"][0]["command"] == "train --set=SEED=1"
    assert data["runs"][0]["lock_sha256"] == "a" * 64
    assert data["runs"][0]["lockfile"] == "releases/1.4.0/cpu.txt"
    assert ref.band("train", "loss").steps[0] == 0


def test_reference_edited_band_is_refused(reference_file):
    data = json.loads(reference_file.read_text())
    data["bands"]["train"]["loss"]["hi"][3] += 1.0
    reference_file.write_text(json.dumps(data))
    with pytest.raises(CurvesError, match="does not match the stored runs"):
        load_reference(reference_file)


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not valid JSON"),
        ("[]", "not a reference"),
        ('{"schema": 99}', "schema"),
        ('{"schema": 1, "name": "x", "experiment": "y", "runs": []}', "non-empty list"),
        (
            '{"schema": 1, "name": "x", "experiment": "y", "runs": [{"curves": {"train": '
            '{"loss": {"a": 1}}}}]}',
            "not a number",
        ),
    ],
)
def test_malformed_reference_files(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(CurvesError, match=message):
        load_reference(path)


def test_unknown_reference_names_the_shipped_ones():
    with pytest.raises(CurvesError, match="unknown reference 'NoSuchExp'.*LmCloudSpmdTiny"):
        load_reference("NoSuchExp")
    with pytest.raises(CurvesError, match="no such reference file"):
        load_reference("missing/ref.json")


# --- compare ----------------------------------------------------------------------------------


def test_compare_inside(make_run, reference_file):
    ref = load_reference(reference_file)
    ok, report = compare(read_run(make_run("fresh", seed=2)), ref)
    assert ok, report
    assert report.splitlines()[-1].startswith("OK: inside the band at all 38 points")


def test_compare_margin_is_k_sigma(make_run, reference_file):
    ref = load_reference(reference_file)  # sigma 0.02
    run = read_run(make_run("fresh", seed=3, shift=0.035))  # above max by 0.035
    assert compare(run, ref, Tolerance(k=2, atol=0))[0]
    assert not compare(run, ref, Tolerance(k=1, atol=0))[0]
    assert compare(run, ref, Tolerance(k=0, atol=0, rtol=0.03))[0]


def test_compare_inside_only_thanks_to_the_margin(make_run, reference_file):
    ref = load_reference(reference_file)
    run = read_run(make_run("fresh", seed=1, shift=-0.04))  # below min by 0.04
    assert compare(run, ref, Tolerance(k=0, atol=0.05))[0]
    ok, report = compare(run, ref, Tolerance(k=0, atol=0.01))
    assert not ok and "OUTSIDE: 38 of 38" in report


def test_compare_outside(make_run, reference_file):
    ref = load_reference(reference_file)
    rows = [
        json.loads(x)
        for x in (make_run("base", seed=2) / "metrics.jsonl").read_text().split("\n")
        if x
    ]
    for row in rows:
        if row["split"] == "train" and row["step"] == 80:
            row["loss"] += 1.0  # a spike
        if row["split"] == EVAL and row["step"] == 150:
            row["log_pplx"] = float("nan")
    ok, report = compare(read_run(make_run("spiky", rows=rows)), ref)
    assert not ok
    assert "OUTSIDE: 2 of 38 points" in report
    assert "train loss step 80:" in report and "> " in report
    assert f"{EVAL} log_pplx step 150: nan" in report


def test_compare_incomplete_run(make_run, reference_file):
    ref = load_reference(reference_file)
    run = read_run(make_run("early", seed=2, steps=range(0, 61, 10), eval_steps=(50,)))
    ok, report = compare(run, ref)
    assert not ok and "INCOMPLETE" in report
    ok, report = compare(run, ref, partial=True)
    assert ok and "logged so far" in report


def test_compare_nothing_in_common(make_run, reference_file):
    run = read_run(make_run(rows=[{"split": "other", "step": 1, "loss": 1.0}]))
    ok, report = compare(run, load_reference(reference_file), partial=True)
    assert not ok and "NOTHING TO COMPARE" in report


def test_compare_notes_other_lock_and_experiment(make_run, reference_file):
    run = read_run(make_run(seed=2, lock="b" * 64, experiment="x.Other"))
    _, report = compare(run, load_reference(reference_file))
    assert "lock sha256 bbbbbbbbbbbb differs" in report
    assert "the run is x.Other" in report


# --- CLI --------------------------------------------------------------------------------------


def test_cli_compare_exit_statuses(make_run, reference_file, capsys):
    assert main(["compare", str(make_run("good", seed=2)), "--reference", str(reference_file)]) == 0
    assert "OK:" in capsys.readouterr().out
    assert (
        main(
            ["compare", str(make_run("bad", seed=2, shift=1.0)), "--reference", str(reference_file)]
        )
        == 1
    )
    assert "OUTSIDE" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["compare", "{tmp}/nope"], "no such job directory"),
        (["compare", "{tmp}"], "no metrics.jsonl"),
        (["compare", "{run}", "--reference", "NoSuchExp"], "unknown reference"),
        (["compare", "{run}", "--reference", "none"], "needs a reference"),
        (["compare", "{other}"], "no shipped reference for experiment x.Other"),
        (["compare", "{run}", "--k", "-1"], "must be >= 0"),
        (["plot", "{tmp}/nope"], "no such job directory"),
        (["plot", "{run}", "--reference", "NoSuchExp"], "unknown reference"),
    ],
)
def test_cli_bad_input_one_line_exit_2(tmp_path, make_run, capsys, argv, message):
    run, other = make_run("r"), make_run("o", experiment="x.Other")
    argv = [a.format(tmp=tmp_path, run=run, other=other) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["compare"], ["compare", "a", "--rtol", "x"]])
def test_cli_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_cli_as_module_bad_input(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "pax.curves", "compare", str(tmp_path / "x")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().endswith("no such job directory") and out.stderr.count("\n") == 1
