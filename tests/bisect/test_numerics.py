"""Bisecting a numerics regression with the reference verdict as the COMMAND.

Hermetic: a toy trainer (tests/bisect/toy_numerics.py) takes its optimizer's update rule
from the package toyopt, whose release 1.2 plants a numerics change; filler packages change
too, inertly. A band of 10 seeds is recorded with toyopt 1.0, then `python -m pax.bisect
--versions` runs "train; compare" in each candidate env (built from tiny wheels in a local
folder, no network) and must name toyopt, and 1.2 as its first bad release.
"""

import json
import os
import subprocess
import sys

import pytest

from pax.bisect import cli as bisect
from pax.curves import judge_recorded, load_reference, record
from tests.bisect.toy_numerics import FILLERS, TOYOPT, TRAINER
from tests.bisect.wheels import build_wheel, write_lock

# Three inert changes beside toyopt's: the search still has to rule fillers out, in two probes
# where the eight would take four (each probe trains and runs compare in a new env).
INERT = FILLERS[:3]


def _train(trainer, wheel, job, seed):
    # A pure-Python wheel is a zip that Python imports from as it is: the band needs no venv.
    subprocess.run(
        [sys.executable, str(trainer), str(job), str(seed)],
        env={**os.environ, "PYTHONPATH": str(wheel)},
        check=True,
    )
    return record.Recorded(job, f"toytrain.py {job.name} {seed}")


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    index = root / "index"
    index.mkdir()
    for version, body in TOYOPT.items():
        build_wheel(index, "toyopt", version, body)
    for name in INERT:
        for version in ("1", "2"):
            build_wheel(index, name, version)
    trainer = root / "toytrain.py"
    trainer.write_text(TRAINER)

    def wheel(version):
        return index / f"toyopt-{version}-py3-none-any.whl"

    seeds = [_train(trainer, wheel("1.0"), root / "band" / f"seed{s}", s) for s in range(1, 11)]
    held = [_train(trainer, wheel("1.0"), root / "held" / f"seed{s}", s) for s in (11, 12, 13)]
    refactor = _train(trainer, wheel("1.1"), root / "held" / "refactor", 14)
    planted = _train(trainer, wheel("1.2"), root / "broken" / "planted", 15)
    planted.fault = {"name": "toyopt 1.2", "description": "momentum buffer as an EMA"}
    ref = record.record(
        seeds,
        "Toy",
        root / "Toy.json",
        root=root,
        calibration={"held_out": [*held, refactor], "broken": [planted]},
    )
    return root, index, trainer, ref


def test_the_toy_verdict_passes_healthy_runs_and_fails_the_planted_change(toy):
    _, _, _, ref = toy
    for entry in ref.calibration["held_out"]:  # three more seeds, and the 1.1 refactor
        assert judge_recorded(entry, ref).ok, judge_recorded(entry, ref).report
    verdict = judge_recorded(ref.calibration["broken"][0], ref)
    assert verdict.code == 1 and verdict.deciding.dev > verdict.deciding.limit


def test_bisect_names_the_package_and_release_that_moved_the_curve(toy):
    root, index, trainer, ref = toy
    good = {"toyopt": "1.0", **{name: "1" for name in INERT}}
    bad = {"toyopt": "2.0", **{name: "2" for name in INERT}}
    job = root / "bisect-run"
    # "train; compare", not "&&": a candidate whose training crashes is skipped (125) instead of
    # counting as a moved curve: by `test -d` before the job directory exists (compare refuses
    # a missing one with 2), by compare once it exists without metrics.
    command = (
        f"rm -rf {job}; python {trainer} {job} 4242; test -d {job} || exit 125; "
        f"python -m pax.curves compare {job} --reference {root / 'Toy.json'}"
    )
    out = root / "out"
    argv = [
        "--good",
        str(write_lock(root / "good.txt", good, index)),
        "--bad",
        str(write_lock(root / "bad.txt", bad, index)),
        "--no-index",
        "--find-links",
        str(index),
        "--cache",
        str(root / "cache"),
        "--out",
        str(out),
        "--versions",
        "--",
        command,
    ]
    rc = bisect.main(argv, log=lambda message: None)
    report = json.loads((out / "report.json").read_text())
    text = (out / "report.txt").read_text()
    assert rc == 0, text
    assert [c["name"] for g in report["culprit"] for c in g["changes"]] == ["toyopt"]
    walk = report["versions"]
    assert (walk["last_good"], walk["first_bad"]) == ("1.1", "1.2"), walk
    assert "first bad release: toyopt 1.2 (last good: 1.1;" in text
    # the failing candidates failed on the curve, with compare's verdict in their output
    bad_steps = [s for s in report["steps"] if s["verdict"] == "bad"]
    assert bad_steps and all("OUTSIDE" in s["output_tail"] for s in bad_steps)
    assert load_reference(root / "Toy.json").n == 10
