"""pax.curves without matplotlib: reading, checks, the verdict and its error rate, the CLI."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from pax.curves import (
    CANNOT_JUDGE,
    INSIDE,
    OUTSIDE,
    CannotJudge,
    CurvesError,
    Reference,
    judge,
    load_reference,
    make_checks,
    make_stats,
    read_metrics,
    read_run,
    record,
    stats,
)
from pax.curves.cli import main
from pax.curves.reference import config_differences, flat_config
from pax.paths import ROOT
from tests.curves.conftest import EVAL, config_for, synthetic_rows


def test_imports_without_jax_numpy_or_matplotlib():
    code = (
        "import sys, pax.curves, pax.curves.cli, pax.curves.record; "
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
        (lambda p: (p / "empty").mkdir() or p / "empty", "not a job directory"),
        (
            lambda p: (
                ((p / "started").mkdir(), (p / "started" / "config.json").write_text("{}"))
                and p / "started"
            ),
            "no metrics.jsonl yet",
        ),
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


# --- Student's t (checked against scipy where the env has it) ---------------------------------


def test_t_quantiles_match_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    for dof in (1, 2, 3, 4, 9, 10, 11, 19, 30):
        for x in (0.2, 1.0, 2.5, 6.0):
            assert stats.two_sided_prob(x, dof) == pytest.approx(
                1 - 2 * scipy_stats.t.sf(x, dof), abs=1e-12
            )
        for alpha in (0.2, 0.01, 1e-3, 1e-4):
            assert stats.two_sided_quantile(alpha, dof) == pytest.approx(
                scipy_stats.t.isf(alpha / 2, dof), rel=1e-9
            )


def test_t_quantiles_textbook_values():
    # Two-sided 5% critical values from any t table (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2).
    table = {1: 12.706, 2: 4.303, 5: 2.571, 9: 2.262, 10: 2.228, 30: 2.042}
    for dof, value in table.items():
        assert stats.two_sided_quantile(0.05, dof) == pytest.approx(value, abs=5e-4)
    assert stats.tolerance(0.01, 6, 10) == pytest.approx(
        stats.two_sided_quantile(0.01 / 6, 9) * math.sqrt(1.1)
    )
    with pytest.raises(ValueError):
        stats.two_sided_prob(1.0, 0)
    with pytest.raises(ValueError):
        stats.tolerance(0.01, 6, 1)


# --- checks and their statistics --------------------------------------------------------------


def test_checks_are_eval_points_and_train_windows(make_run):
    curves = [read_run(make_run(f"s{s}", seed=s)).curves for s in (1, 2, 3)]
    checks = make_checks(curves, window=50)
    assert [c.label for c in checks] == [
        "train loss mean 10..50",
        "train loss mean 60..100",
        "train loss mean 110..150",
        "eval embedded loss @ 50",
        "eval embedded loss @ 100",
        "eval embedded loss @ 150",
    ]
    assert checks[0].steps == (10, 20, 30, 40, 50)
    series = curves[0]["train"]["loss"]
    assert checks[1].value(curves[0]) == pytest.approx(
        sum(series[s] for s in (60, 70, 80, 90, 100)) / 5
    )
    assert [c.steps for c in make_checks(curves, window=30)][:2] == [(10, 20, 30), (40, 50, 60)]
    # only steps every run logged; a window with none of them is dropped
    short = read_run(make_run("short", seed=4, steps=range(10, 71, 10), eval_steps=(50,))).curves
    assert [c.label for c in make_checks([*curves, short], window=50)] == [
        "train loss mean 10..50",
        "train loss mean 60..70",
        "eval embedded loss @ 50",
    ]


def test_stats_are_mean_and_sample_std(make_run):
    curves = [read_run(make_run(f"s{s}", seed=s)).curves for s in (1, 2, 3, 4)]
    stat = make_stats(curves)[3]  # eval @ 50
    values = [c[EVAL]["loss"][50] for c in curves]
    mean = sum(values) / 4
    assert stat.n == 4 and stat.mean == pytest.approx(mean)
    assert stat.std == pytest.approx(math.sqrt(sum((v - mean) ** 2 for v in values) / 3))


def test_stats_refuse_bad_runs(make_run):
    nan_run = read_run(make_run(rows=['{"split": "train", "step": 10, "loss": NaN}'])).curves
    ok_run = read_run(make_run("ok", rows=['{"split": "train", "step": 10, "loss": 1.0}'])).curves
    with pytest.raises(CurvesError, match="not finite"):
        make_stats([nan_run, ok_run])
    with pytest.raises(CurvesError, match="at least two"):
        make_stats([ok_run])
    with pytest.raises(CurvesError, match="window"):
        make_checks([ok_run], window=0)


def test_flat_config_drops_what_does_not_change_the_curve():
    flat = flat_config(config_for(seed=7))
    assert "task.train.seed" not in flat and "datasets.train.seed" not in flat
    assert "task.data.training_seed" not in flat
    assert flat["task.data.eval_seed"] == 0  # the eval text is the band's whatever the seed
    assert "datasets.embedded.data_dir" not in flat
    assert "task.train.checkpoint_every_n_steps" not in flat
    assert flat["task.optimizer.learning_rate"] == 0.003
    assert flat["datasets.train.source"] == "embedded"
    band = flat_config(config_for(seed=1))
    assert config_differences(band, flat) == ([], [])
    shorter = flat_config(config_for(seed=1, num_train_steps=60))
    assert config_differences(band, shorter) == ([], [])  # a prefix of the band's run
    longer = flat_config(config_for(seed=1, num_train_steps=200))
    assert config_differences(band, longer)[0] == ["task.train.num_train_steps 200 (band 150)"]
    other = config_for(seed=1)
    other["task"]["optimizer"]["learning_rate"] = 0.03
    other["task"]["model"]["per_dim_scale"] = True
    different, one_sided = config_differences(band, flat_config(other))
    assert different == ["task.optimizer.learning_rate 0.03 (band 0.003)"]
    assert one_sided == ["task.model.per_dim_scale (only the run has it)"]


# --- the reference file -----------------------------------------------------------------------


def test_reference_round_trip(reference_file):
    ref = load_reference(reference_file)
    assert ref.n == 10 and ref.seeds() == list(range(1, 11))
    assert ref.experiment.endswith("LmCloudSpmdTiny") and ref.alpha == 0.01
    assert ref.config == flat_config(config_for())
    assert [len(ref.calibration[k]) for k in ("held_out", "broken")] == [2, 1]
    assert ref.calibration["broken"][0]["fault"]["name"] == "shifted"
    run = ref.runs[0]
    assert run["command"] == "train ref1" and run["release"] == "1.6.0"
    assert run["job_dir"] == "ref1" and run["lockfile"] == "releases/1.6.0/cpu.txt"
    assert set(run["curves"]["train"]) == {"loss", "log_pplx"}  # grad_norm etc. not kept
    again = Reference.from_json(json.loads(reference_file.read_text()), "again")
    assert [s.to_json() for s in again.stats] == [s.to_json() for s in ref.stats]


def test_reference_edited_checks_are_refused(reference_file):
    data = json.loads(reference_file.read_text())
    data["checks"][0]["mean"] -= 0.5  # someone "fixed" a band by hand
    reference_file.write_text(json.dumps(data))
    with pytest.raises(CurvesError, match="do not match the stored runs"):
        load_reference(reference_file)


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "not valid JSON"),
        ("[]", "not a reference"),
        ('{"schema": 1}', "schema 1, this Pax reads 2; re-record"),
        ('{"schema": 2, "name": "x"}', "'experiment' missing"),
        ('{"schema": 2, "name": "x", "experiment": "e", "runs": 3}', "must be a list"),
        ('{"schema": 2, "name": "x", "experiment": "e", "runs": []}', "at least two"),
    ],
)
def test_malformed_reference_files(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(CurvesError, match=message):
        load_reference(path)


def test_unknown_reference_names_the_shipped_ones():
    with pytest.raises(CurvesError, match="unknown reference 'Nope'; shipped: LmCloudSpmdTiny"):
        load_reference("Nope")


def test_record_refuses_seeds_of_two_configs(tmp_path, make_run):
    from pax.curves import record

    a = record.Recorded(make_run("a", seed=1), "a")
    other = config_for(2)
    other["task"]["optimizer"]["learning_rate"] = 0.1
    b = record.Recorded(make_run("b", seed=2, config=other), "b")
    with pytest.raises(CurvesError, match="another config.*learning_rate"):
        record.record([a, b], "T", tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()


# --- the verdict ------------------------------------------------------------------------------


def test_healthy_seeds_pass_and_say_what_decided(make_run, reference_file):
    ref = load_reference(reference_file)
    for seed in (201, 202, 203):
        verdict = judge(read_run(make_run(f"fresh{seed}", seed=seed)), ref)
        assert verdict.code == INSIDE, verdict.report
    last = verdict.report.splitlines()[-1]
    assert last.startswith("INSIDE: all 6 checks; deciding (closest to its limit): ")
    row = verdict.deciding
    assert row is max(verdict.rows, key=lambda r: abs(r.dev))
    limit = stats.tolerance(0.01, 6, 10)
    assert row.limit == pytest.approx(limit)
    assert f"of the allowed ±{limit:.2f} s; margin {limit - abs(row.dev):.2f} s" in last
    report = verdict.report
    assert "band: release 1.6.0 cpu (lock aaaaaaaaaaaa)" in report
    assert "run:  release 1.6.0 cpu (lock aaaaaaaaaaaa), seed 203" in report
    assert "probability <= 1% (Student's t, 9 dof, Bonferroni over 6 checks)" in report


def test_deviation_is_in_seed_stds(make_run, reference_file):
    ref = load_reference(reference_file)
    stat = ref.stats[4]  # eval @ 100
    rows = synthetic_rows(2)
    for row in rows:
        if row["split"] == EVAL and row["step"] == 100:
            row["loss"] = stat.mean + 3.0 * stat.std
    verdict = judge(read_run(make_run("x", rows=rows)), ref)
    assert verdict.rows[4].dev == pytest.approx(3.0)
    assert verdict.rows[4].inside  # 3 s is inside the 1% limit (4.64 s) ...
    loose = judge(read_run(make_run("x", rows=rows)), ref, alpha=0.5)  # ... not a 50% one
    assert loose.code == OUTSIDE and loose.rows[4].limit < 3.0
    limit = stats.tolerance(0.01, 6, 10)
    for row in rows:
        if row["split"] == EVAL and row["step"] == 100:
            row["loss"] = stat.mean - (limit + 0.1) * stat.std  # just past the limit
    verdict = judge(read_run(make_run("y", rows=rows)), ref)
    assert verdict.code == OUTSIDE and verdict.deciding.stat is stat
    assert "OUTSIDE: 1 of 6 checks; deciding: eval embedded loss @ 100" in verdict.report
    assert "past the limit by 0.10 s" in verdict.report


def test_a_single_noisy_train_step_does_not_decide(make_run, reference_file):
    # A one-batch spike of 4 step-noise stds moves a 5-step window mean by less than its limit.
    ref = load_reference(reference_file)
    rows = synthetic_rows(5)
    for row in rows:
        if row["split"] == "train" and row["step"] == 80:
            row["loss"] += 4 * 0.05
    assert judge(read_run(make_run("spike", rows=rows)), ref).code == INSIDE


def test_broken_runs_fail(make_run, reference_file):
    ref = load_reference(reference_file)
    verdict = judge(read_run(make_run("up", seed=2, shift=0.3)), ref)
    assert verdict.code == OUTSIDE and "OUTSIDE: 6 of 6 checks" in verdict.report
    rows = synthetic_rows(2)
    for row in rows:
        if row["split"] == EVAL and row["step"] == 150:
            row["loss"] = float("nan")
    verdict = judge(read_run(make_run("nan", rows=rows)), ref)
    assert verdict.code == OUTSIDE
    assert (
        "deciding: eval embedded loss @ 150 = nan" in verdict.report
        and "not finite" in verdict.report
    )


def test_false_alarm_rate_is_as_stated():
    """Many synthetic bands of 10 seeds, each judging one more healthy seed: false alarms come
    at most as often as alpha says, and not much less often (a useless, blunt rule would hide
    behind a tiny rate). Bonferroni gives 1 - (1 - alpha/6)^6 = 0.0958 at alpha 0.1 for
    independent checks; the synthetic runs' shared offset correlates them, which lowers it
    (0.076 with these seeds, deterministic)."""
    trials, alpha, alarms = 1500, 0.1, 0
    for t in range(trials):
        band = [_curves(1000 * t + s) for s in range(10)]
        ref = Reference("T", "e", [{"curves": c} for c in band], alpha=alpha)
        alarms += _judge_curves(_curves(1000 * t + 999), ref) == OUTSIDE
    rate = alarms / trials
    assert alpha / 2 < rate <= alpha, rate


def _curves(seed):
    curves = {}
    for row in synthetic_rows(seed):
        curves.setdefault(row["split"], {}).setdefault("loss", {})[row["step"]] = row["loss"]
    return curves


def _judge_curves(curves, ref):
    from pax.curves import Run

    run = Run(job_dir=Path("x"), curves=curves, experiment="e")
    return judge(run, ref, check_config=False).code


def test_shorter_run_is_judged_on_the_checks_it_reaches(make_run, reference_file):
    ref = load_reference(reference_file)
    short = make_run(
        "short", seed=2, config=config_for(2, num_train_steps=60), steps=range(10, 61, 10)
    )
    verdict = judge(read_run(short), ref)
    assert verdict.code == INSIDE, verdict.report
    assert [r.stat.check.label for r in verdict.rows] == [
        "train loss mean 10..50",
        "eval embedded loss @ 50",
    ]
    assert "trains 60 of the band's 150 steps: judged on the 2 checks it reaches" in verdict.report
    assert verdict.rows[0].limit == pytest.approx(stats.tolerance(0.01, 2, 10))
    tiny = make_run("tiny", seed=2, config=config_for(2, num_train_steps=20), steps=(10, 20))
    with pytest.raises(CurvesError, match="trains 20 steps, before the reference's first check"):
        judge(read_run(tiny), ref)


def test_run_that_stopped_early_cannot_be_judged(make_run, reference_file):
    ref = load_reference(reference_file)
    run = read_run(make_run("early", seed=2, steps=range(10, 61, 10), eval_steps=(50,)))
    verdict = judge(run, ref)
    assert verdict.code == CANNOT_JUDGE
    assert "CANNOT JUDGE: the run has not logged 4 of the 6 checks" in verdict.report
    verdict = judge(run, ref, partial=True)
    assert verdict.code == INSIDE and "(the 2 logged so far)" in verdict.report
    # outside wins over incomplete: a run that blew up and stopped is a failure
    rows = synthetic_rows(2, steps=range(10, 61, 10), eval_steps=(50,), shift=2.0)
    assert judge(read_run(make_run("blown", rows=rows)), ref).code == OUTSIDE


def test_other_lock_and_platform_are_compared_with_a_note(make_run, reference_file):
    ref = load_reference(reference_file)
    run = read_run(make_run("r", seed=2, lock="b" * 64, release="1.5.0", platform="gpu"))
    verdict = judge(run, ref)
    assert verdict.code == INSIDE
    assert "run:  release 1.5.0 gpu (lock bbbbbbbbbbbb)" in verdict.report
    assert "the run's lock differs from the band's: compared all the same" in verdict.report
    assert "the band was recorded on cpu, the run ran on gpu" in verdict.report


def test_a_run_resumed_in_another_environment_names_each_segment(make_run, reference_file):
    ref = load_reference(reference_file)
    job = make_run("r", seed=2)
    first = json.loads((job / "manifest.json").read_text())
    segment = {"mode": "train", "release": "1.6.0", "platform": "cpu", "lock_sha256": "a" * 64}
    first["segments"] = [
        {**segment, "from_step": 0},
        {**segment, "from_step": 100, "release": "1.3.0", "lock_sha256": "c" * 64},
    ]
    (job / "manifest.json").write_text(json.dumps(first))
    verdict = judge(read_run(job), ref)
    assert (
        "run:  release 1.6.0 cpu (lock aaaaaaaaaaaa) steps 1-100; "
        "release 1.3.0 cpu (lock cccccccccccc) steps 101-150, seed 2"
    ) in verdict.report
    assert "the run's lock differs from the band's" in verdict.report
    with pytest.raises(CurvesError, match="trained in 2 environments"):
        record.record([record.Recorded(job, "train")], "Tiny", job.parent / "ref.json")


def test_other_experiment_or_config_is_refused(make_run, reference_file):
    ref = load_reference(reference_file)
    with pytest.raises(CurvesError, match="is a run of x.Other, the reference Tiny is for"):
        judge(read_run(make_run("o", seed=2, experiment="x.Other")), ref)
    config = config_for(2)
    config["task"]["optimizer"]["learning_rate"] = 0.03
    with pytest.raises(CurvesError, match=r"ran another config.*learning_rate 0.03 \(band 0.003\)"):
        judge(read_run(make_run("c", seed=2, config=config)), ref)
    with pytest.raises(CannotJudge, match="no config.json"):
        judge(read_run(make_run("n", seed=2, config=False)), ref)


def test_fault_file_is_noted(make_run, reference_file):
    job = make_run("f", seed=2, shift=1.0)
    (job / "fault.json").write_text('{"name": "lr_x10", "description": "learning rate x10"}')
    verdict = judge(read_run(job), load_reference(reference_file))
    assert "note: this run was broken on purpose: lr_x10 (learning rate x10)" in verdict.report


# --- CLI --------------------------------------------------------------------------------------


def test_cli_compare_exit_statuses(tmp_path, make_run, reference_file, capsys):
    ref = ["--reference", str(reference_file)]
    assert main(["compare", str(make_run("good", seed=2)), *ref]) == 0
    assert "INSIDE" in capsys.readouterr().out
    assert main(["compare", str(make_run("bad", seed=2, shift=1.0)), *ref]) == 1
    assert "OUTSIDE" in capsys.readouterr().out
    early = make_run("early", seed=2, steps=range(10, 61, 10), eval_steps=(50,))
    assert main(["compare", str(early), *ref]) == 125
    assert "CANNOT JUDGE" in capsys.readouterr().out
    assert main(["compare", str(early), "--partial", *ref]) == 0
    capsys.readouterr()
    # Started (config.json written) but no step logged yet: nothing to judge either way.
    started = tmp_path / "started"
    started.mkdir()
    (started / "config.json").write_text("{}")
    assert main(["compare", str(started), *ref]) == 125
    err = capsys.readouterr().err
    assert err == (
        f"python -m pax.curves: error: cannot judge: {started}: no metrics.jsonl yet (the run "
        "has not logged a step)\n"
    )


def test_cli_calibration(reference_file, capsys):
    assert main(["calibration", str(reference_file)]) == 0
    out = capsys.readouterr().out
    assert "held-out seed 101" in out and "shifted" in out and "calibration holds" in out
    data = json.loads(reference_file.read_text())
    data["calibration"]["held_out"].append(data["calibration"]["broken"][0])  # a wrong label
    reference_file.write_text(json.dumps(data))
    assert main(["calibration", str(reference_file)]) == 1
    assert "FAILS: 1 run(s) judged wrongly" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["compare", "{run}", "--reference", "NoSuchExp"], "unknown reference"),
        (["compare", "{run}", "--reference", "none"], "needs a reference"),
        (["compare", "{other}"], "no shipped reference for experiment x.Other"),
        (["compare", "{other}", "--reference", "{ref}"], "is a run of x.Other"),
        (["compare", "{lr}", "--reference", "{ref}"], "ran another config"),
        (["compare", "{tmp}/file"], "not a directory"),
        # a mistyped run directory is the same at every bisect step: bad input, not "skip"
        (["compare", "{tmp}/nope"], "{tmp}/nope: no such job directory; check the path"),
        (["compare", "{tmp}"], "not a job directory (no config.json, no metrics.jsonl)"),
        (["plot", "{tmp}/nope"], "no such job directory"),
        (["plot", "{run}", "--reference", "NoSuchExp"], "unknown reference"),
    ],
)
def test_cli_bad_input_one_line_exit_2(tmp_path, make_run, reference_file, capsys, argv, message):
    run, other = make_run("r"), make_run("o", experiment="x.Other")
    config = config_for(1)
    config["task"]["optimizer"]["learning_rate"] = 0.03
    lr = make_run("lr", config=config)
    (tmp_path / "file").write_text("x")
    argv = [a.format(tmp=tmp_path, run=run, other=other, ref=reference_file, lr=lr) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message.format(tmp=tmp_path) in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["compare"],
        ["compare", "a", "--alpha", "x"],
        ["compare", "a", "--alpha", "2"],
    ],
)
def test_cli_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_cli_as_module_refuses_a_missing_run(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "pax.curves", "compare", str(tmp_path / "x")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert "no such job directory" in out.stderr and out.stderr.count("\n") == 1


def test_record_keeps_lockfiles_repo_relative(tmp_path, make_run):
    # A shared env built from another checkout names that checkout's lockfile.
    from pax.curves import record

    dirs = [make_run(f"s{s}", seed=s) for s in (1, 2)]
    manifest = json.loads((dirs[0] / "manifest.json").read_text())
    manifest["lockfile"] = "/elsewhere/checkout/releases/1.6.0/cpu.txt"
    (dirs[0] / "manifest.json").write_text(json.dumps(manifest))
    ref = record.record(
        [record.Recorded(d, "c") for d in dirs], "T", tmp_path / "t.json", root=tmp_path
    )
    assert [r["lockfile"] for r in ref.runs] == ["releases/1.6.0/cpu.txt"] * 2
