"""pax.curves.band: which runs it trains, with which commands, and what it records.

The trainer is replaced by a stand-in "python" that writes a synthetic job directory
(tests/curves/conftest.py's) for each `-m pax.main` / `-m pax.curves.faults` call it gets, so
the recording logic runs in seconds; the real trainer's side is covered by the shipped
reference's calibration (tests/curves/test_shipped.py).
"""

import json
import sys
import textwrap

import pytest

from pax.curves import CurvesError, judge_recorded, load_reference
from pax.curves import band as refs
from pax.paths import ROOT

FAKE = textwrap.dedent("""\
    #!{python}
    import json, sys
    sys.path[:0] = {path!r}  # the test's own: pytest may sit beside the env, not in it
    from pathlib import Path
    from tests.curves.conftest import config_for, write_run
    args = sys.argv[1:]
    with open("calls.txt", "a") as f:
        f.write(" ".join(args) + "\\n")
    flags = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
    sets = dict(a.split("=", 1)[1].split("=", 1) for a in args if a.startswith("--set="))
    seed, steps = int(sets["SEED"]), int(sets.get("NUM_TRAIN_STEPS", 150))
    fault = flags.get("fault")
    job = Path(flags["job_log_dir"])
    write_run(job, seed=seed, shift=0.8 if fault else 0.0, steps=range(10, steps + 1, 10),
              config=config_for(seed, num_train_steps=steps))
    if fault:
        (job / "fault.json").write_text(json.dumps({{"name": fault, "description": "fake"}}))
    sys.exit(3 if seed == 666 else 0)
""")


@pytest.fixture
def fake_python(tmp_path):
    path = tmp_path / "bin" / "python"
    path.parent.mkdir()
    path.write_text(FAKE.format(python=sys.executable, path=[str(ROOT), *sys.path]))
    path.chmod(0o755)
    return path


def test_parse_args_defaults_and_ranges():
    args = refs.parse_args([])
    assert args.seeds == list(range(1, 11)) and args.held_out == [11, 12, 1234]
    assert args.faults == list(refs.FAULTS) and args.fault_steps is None
    args = refs.parse_args(["--seeds=1-3,7", "--held-out", "none", "--faults", "lr_x10"])
    assert (args.seeds, args.held_out, args.faults) == ([1, 2, 3, 7], [], ["lr_x10"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--seeds=1"], "at least 2 distinct seeds"),
        (["--seeds=1,1"], "at least 2 distinct"),
        (["--seeds=a-b"], "integers like 1,2,3 or 1-10"),
        (["--seeds=1-5", "--held-out=5,6"], "must not be band seeds: [5]"),
        (["--faults=lr_x10,nope"], "unknown fault(s) nope"),
        (["--fault-steps=0"], "must be positive"),
        (["--frobnicate"], "unrecognized arguments"),
    ],
)
def test_parse_args_bad_input(argv, message):
    with pytest.raises(CurvesError) as err:
        refs.parse_args(argv)
    assert message in str(err.value)


def test_records_band_held_out_and_broken_runs(tmp_path, fake_python):
    out = tmp_path / "Fake.json"
    args = refs.parse_args(
        [
            "--exp=tests.Fake",
            "--seeds=1-4",
            "--held-out=11",
            "--faults=lr_x10,no_warmup",
            "--fault-steps=60",
            f"--out={out}",
        ]
    )
    logs = []
    ref = refs.record(fake_python, {}, "1.6.0", args, log=logs.append, root=tmp_path)
    assert load_reference(out).seeds() == [1, 2, 3, 4]
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert calls[0] == (
        "-m pax.main --exp=tests.Fake --job_log_dir=runs/references/Fake/seed1 --set=SEED=1"
    )
    assert calls[6] == (
        "-m pax.curves.faults --exp=tests.Fake --job_log_dir=runs/references/Fake/fault-no_warmup "
        "--fault=no_warmup --set=SEED=102 --set=NUM_TRAIN_STEPS=60"
    )
    assert ref.runs[0]["command"] == (
        "./noxw -s train -- 1.6.0 cpu --exp=tests.Fake "
        "--job_log_dir=runs/references/Fake/seed1 --set=SEED=1"
    )
    broken = ref.calibration["broken"]
    # the env's python, relative to the checkout: .venv/pax-1.6.0-cpu/bin/python in a real one
    assert broken[0]["command"].startswith("bin/python -m pax.curves.faults --exp=tests.Fake")
    assert [b["fault"]["name"] for b in broken] == ["lr_x10", "no_warmup"]
    assert [b["num_train_steps"] for b in broken] == [60, 60]
    assert [r["seed"] for r in ref.calibration["held_out"]] == [11]
    assert judge_recorded(ref.calibration["held_out"][0], ref).ok
    assert not any(judge_recorded(b, ref).ok for b in broken)
    assert "--held-out=11 --faults=lr_x10,no_warmup --fault-steps=60" in ref.recorded_by
    assert len(calls) == 7 and all("took" in m for m in logs)
    assert ref.summary() == "Fake (4 seeds; 1 held_out, 2 broken)"

    # --reuse: finished runs are kept, so only the run whose directory is gone trains again
    (tmp_path / "calls.txt").unlink()
    import shutil

    shutil.rmtree(tmp_path / "runs/references/Fake/seed3")
    refs.record(
        fake_python,
        {},
        "1.6.0",
        refs.parse_args([*_argv(out), "--reuse", "--fault-steps=60"]),
        log=logs.append,
        root=tmp_path,
    )
    assert (tmp_path / "calls.txt").read_text().count("\n") == 1
    assert "seed3" in (tmp_path / "calls.txt").read_text()
    assert all(r["wall_s"] is not None for r in load_reference(out).runs)  # kept on reuse
    # broken runs of another length are not reused: without --fault-steps, the seeds' length
    (tmp_path / "calls.txt").unlink()
    again = refs.parse_args([*_argv(out), "--reuse"])
    ref = refs.record(fake_python, {}, "1.6.0", again, log=logs.append, root=tmp_path)
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert len(calls) == 2 and not any("NUM_TRAIN_STEPS" in c for c in calls)
    assert [b["num_train_steps"] for b in ref.calibration["broken"]] == [150, 150]
    assert "--fault-steps" not in ref.recorded_by
    (tmp_path / "calls.txt").unlink()
    refs.record(fake_python, {}, "1.6.0", again, log=logs.append, root=tmp_path)
    assert not (tmp_path / "calls.txt").exists()  # all reused now


def _argv(out):
    return [
        "--exp=tests.Fake",
        "--seeds=1-4",
        "--held-out=11",
        "--faults=lr_x10,no_warmup",
        f"--out={out}",
    ]


def test_failed_training_stops_the_recording(tmp_path, fake_python):
    out = tmp_path / "Fake.json"
    args = refs.parse_args(
        ["--exp=tests.Fake", "--seeds=1,666", "--held-out=none", "--faults=none", f"--out={out}"]
    )
    with pytest.raises(CurvesError, match=r"seed666: training failed \(exit 3\)") as failed:
        refs.record(fake_python, {}, "1.6.0", args, log=lambda m: None, root=tmp_path)
    assert failed.value.exit_code == 3  # the session ends with the run's own status
    assert not out.exists()
    assert json.loads((tmp_path / "runs/references/Fake/seed1/config.json").read_text())
