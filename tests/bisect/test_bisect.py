"""pax.bisect over a hermetic index: tiny wheels built on the fly, lockfiles over them.

No network: wheels come from a local folder (`--no-index --find-links`), through the shared,
hash-verified wheel cache, into venvs built with `--no-deps`. The scenario (packages, and
COMMAND `python check.py`) is tests/bisect/wheels.py's.
"""

import json
import math
import re

import pytest

from pax import paths
from pax.bisect import cli as bisect
from pax.bisect import groups as grouping
from pax.bisect import search
from pax.bisect.rule import FLAKY
from pax.lockfile import Pin
from pax.releases import diff
from tests.bisect.wheels import sha256, write_lock

LOG = None  # a callable to see progress while debugging


def run_bisect(tmp_path, index, cache, good, bad, *extra, command=None, pythons=(None, None)):
    """pythons: the Pythons GOOD's and BAD's lock headers name ("3.11"; None: none)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    good_lock = write_lock(tmp_path / "good.txt", good, index, pythons[0])
    bad_lock = write_lock(tmp_path / "bad.txt", bad, index, pythons[1])
    out = tmp_path / "out"
    argv = [
        "--good",
        str(good_lock),
        "--bad",
        str(bad_lock),
        "--no-index",
        "--find-links",
        str(index),
        "--cache",
        str(cache),
        "--out",
        str(out),
        *extra,
        "--",
        *(command or ["python", str(index.parent / "check.py")]),
    ]
    lines = []
    rc = bisect.main(argv, log=LOG or lines.append)
    report = json.loads((out / "report.json").read_text())
    return rc, report, (out / "report.txt").read_text()


def culprit_names(report):
    return sorted(c["name"] for g in report["culprit"] for c in g["changes"])


def bound(n):
    """Env builds for a deterministic single culprit: 2 endpoints, the search, 2 confirmations."""
    return math.ceil(math.log2(n)) + 4


def test_one_culprit_among_many(tmp_path, index, cache, capsys):
    good = {**{f"p{i:02d}": "1.0" for i in range(22)}, "gone": "1.0"}
    bad = {**{f"p{i:02d}": "1.1" for i in range(22)}, "fresh": "1.0"}
    rc, report, text = run_bisect(tmp_path, index, cache, good, bad)
    assert rc == 0, text
    assert culprit_names(report) == ["p13"]
    assert (report["alone"], report["without"]) == ("bad", "good") and report["confirmed"]
    n = len(report["groups"])
    assert n == 24
    assert report["env_builds"] <= bound(n), text
    # a verdict judged again reuses its env: verdicts outnumber builds
    assert report["verdicts"] > report["env_builds"] == len(report["builds"])
    assert {b["kind"] for b in report["builds"]} == {"cold", "warm"}
    assert "p13 1.0 -> 1.1" in text and "p13 1.1 is broken" in text  # culprit + bad env's tail
    assert report["skipped"] == [] and report["flaky"]["mixed_steps"] == []
    steps = (tmp_path / "out" / "steps.jsonl").read_text().splitlines()
    assert len(steps) == report["verdicts"]
    err = capsys.readouterr().err.strip().splitlines()  # the report, the verdict first and last
    assert err[0] == err[-1] == "RESULT   culprit confirmed: p13 1.0 -> 1.1"


def test_culprit_inside_a_coupled_group(tmp_path, index, cache):
    good = {
        "jax": "0.1",
        "jaxlib": "0.1",
        "libtpu": "0.1",
        **{f"q{i:02d}": "1.0" for i in range(6)},
    }
    bad = {"jax": "0.2", "jaxlib": "0.2", "libtpu": "0.2", **{f"q{i:02d}": "2.0" for i in range(6)}}
    rc, report, text = run_bisect(tmp_path, index, cache, good, bad, "--group", "q01,q02")
    assert rc == 0, text
    assert [g["name"] for g in report["culprit"]] == ["jax"]
    assert culprit_names(report) == ["jax", "jaxlib", "libtpu"]
    assert len(report["groups"]) == 6  # jax+jaxlib+libtpu, q01+q02, and four more
    assert report["env_builds"] <= bound(6)


# Slow tier: the fast tier finds interactions in tests/bisect/test_search.py's simulations.
@pytest.mark.slow
def test_two_changes_that_break_only_together(tmp_path, index, cache):
    good = {"alpha": "1", "beta": "1", **{f"r{i:02d}": "1" for i in range(8)}}
    bad = {"alpha": "2", "beta": "2", **{f"r{i:02d}": "2" for i in range(8)}}
    rc, report, text = run_bisect(tmp_path, index, cache, good, bad)
    assert rc == 0, text
    assert report["interaction"] and report["confirmed"]
    assert culprit_names(report) == ["alpha", "beta"]
    assert report["roles"] == {"alpha": "breaks", "beta": "breaks"}
    assert "only together" in text


def test_intermediate_env_violating_a_dependency_is_skipped(tmp_path, index, cache):
    # Order: a00 a01 a02 m-core m-user z00..z03; the first probe, GOOD + a00..m-core, pairs
    # m-core 2 with m-user 1 (which needs m-core<2): pip check fails there.
    good = {
        **{f"a{i:02d}": "1" for i in range(3)},
        "m-core": "1",
        "m-user": "1",
        **{f"z{i:02d}": "1" for i in range(4)},
    }
    bad = {k: "2" for k in good}
    rc, report, text = run_bisect(tmp_path, index, cache, good, bad)
    assert rc == 0, text
    assert culprit_names(report) == ["z02"]
    skipped = report["skipped"]  # the skipped steps, each with its reason
    assert skipped and all("pip check failed" in s["reason"] for s in skipped)
    assert re.search(r"m-user.* (has requirement|requires) `?m-core<2", skipped[0]["reason"])
    assert [s["step"] for s in skipped] == [
        s["number"] for s in report["steps"] if s["verdict"] == "skip"
    ]
    assert f"step {skipped[0]['step']} (" in text and "pip check failed" in text
    assert report["env_builds"] <= bound(9) + len(skipped)


def test_flaky_command_end_to_end(tmp_path, index, cache, monkeypatch, capsys):
    """A check that fails 30% of its runs on good envs (tests/bisect/wheels.py's FLAKE_RATE),
    the --flaky preset: the culprit is named and confirmed, the mixed votes reported."""
    monkeypatch.setenv("FLAKE_RATE", "0.3")
    monkeypatch.setenv("FLAKE_SEED", "3")
    monkeypatch.setenv("FLAKE_COUNTER", str(tmp_path / "counter"))
    good = {f"p{i:02d}": "1.0" for i in range(8, 16)}
    bad = {f"p{i:02d}": "1.1" for i in range(8, 16)}
    rc, report, text = run_bisect(tmp_path, index, cache, good, bad, "--flaky")
    assert rc == 0, text
    assert culprit_names(report) == ["p13"] and report["confirmed"]
    assert report["rule"] == {"runs": 5, "passes": 1, "describe": FLAKY.describe()}
    mixed = [s for s in report["steps"] if s["mixed"]]
    assert mixed and report["flaky"]["mixed_steps"] == [s["number"] for s in mixed]
    assert all(s["tally"] == f"1/{len(s['votes'])} passed" for s in mixed)
    assert all(len(s["votes"]) == 5 for s in report["steps"] if s["verdict"] == "bad")
    assert 0 < report["flaky"]["flake_rate"] < 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == err[-1] and err[0].startswith("RESULT   culprit confirmed: p13 1.0 -> 1.1")
    assert "[warning: COMMAND is flaky: mixed votes in" in err[0]


def test_two_breaking_changes_give_no_confirmed_culprit(tmp_path, index, cache, capsys):
    """p13 1.1 and z02 2 each break COMMAND: p13 is found first and fails alone on GOOD, but
    BAD without it still fails. Reverting it would not fix BAD, so it is no confirmed culprit."""
    good, bad = {"p13": "1.0", "q00": "1.0", "z02": "1"}, {"p13": "1.1", "q00": "2.0", "z02": "2"}
    rc, report, text = run_bisect(tmp_path, index, cache, good, bad)
    assert rc == 1 and report["status"] == "partial" and not report["confirmed"]
    assert culprit_names(report) == ["p13"] and (report["alone"], report["without"]) == (
        "bad",
        "bad",
    )
    err = capsys.readouterr().err.splitlines()
    assert (
        err[0]
        == err[-1]
        == (
            "RESULT   partial: p13 1.0 -> 1.1 breaks COMMAND, but BAD without it still fails: another "
            "change breaks COMMAND too (bisect again with BAD minus this culprit)"
        )
    )


def test_versions_names_the_first_bad_release(tmp_path, index, cache):
    good, bad = {"vpkg": "1.0", "q00": "1.0"}, {"vpkg": "2.0", "q00": "1.0"}
    rc, report, text = run_bisect(tmp_path, index, cache, good, bad, "--versions")
    assert rc == 0, text
    assert culprit_names(report) == ["vpkg"]
    walk = report["versions"]
    assert walk["between"] == ["1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7"]
    assert (walk["status"], walk["last_good"], walk["first_bad"]) == ("found", "1.5", "1.6")
    assert "pip check failed" in walk["skipped"]["1.3"]
    assert "no wheel of vpkg==1.4 for this platform" in walk["skipped"]["1.4"]
    # ceil(log2 8) = 3 probes, one per skipped release, one more to confirm the first bad one
    # (its second verdict reuses the env; the last good one, 1.5, needs a build)
    assert walk["env_builds"] <= walk["bound"] + len(walk["skipped"]) + 1
    pinned = [s["pin"] for s in report["steps"] if s["pin"]]
    assert "vpkg==1.6" in pinned and pinned.count("vpkg==1.6") == 2
    assert "first bad release: vpkg 1.6 (last good: 1.5;" in text


def test_versions_needs_one_package_that_breaks_alone():
    changes = [change("jax", "0.1", "0.2"), change("jaxlib", "0.1", "0.2"), change("q00", "1", "2")]
    groups = grouping.make_groups(changes)
    verdicts = search.Verdicts(lambda state, why: "good", log=lambda m: None)
    found = search.Outcome("found", culprit=(0,), alone="bad")  # jax + jaxlib
    walk = search.walk_versions(found, groups, verdicts, published=lambda name: {})
    assert walk["status"].startswith("skipped: the culprit is a group of 2 packages")
    unconfirmed = search.Outcome("unconfirmed", culprit=(1,), alone="bad")
    walk = search.walk_versions(unconfirmed, groups, verdicts, published=lambda name: {})
    assert "one confirmed culprit that breaks alone" in walk["status"]


def test_endpoints_that_do_not_reproduce(tmp_path, index, cache):
    good = {"q00": "1.0", "q01": "1.0"}
    bad = {"q00": "2.0", "q01": "2.0"}
    rc, report, text = run_bisect(tmp_path, index, cache, good, bad)
    assert rc == 1
    assert report["status"] == "not reproduced"
    assert report["verdict"].startswith("endpoints do not reproduce: COMMAND does not fail on BAD")
    assert report["verdicts"] == 3 and report["culprit"] is None  # BAD passed: judged twice
    (tmp_path / "x").mkdir()
    rc, report, text = run_bisect(
        tmp_path / "x", index, cache, good, bad, command=["python", "-c", "raise SystemExit(3)"]
    )
    assert rc == 1 and "does not pass on GOOD" in report["verdict"]
    assert report["verdicts"] == 2 and report["env_builds"] == 1


# The tool's own inputs: one line on stderr, exit 2, report.json of what was done --------


def test_default_folders_are_under_the_user_cache(tmp_path, index, capsys, monkeypatch):
    """No --out, no --cache: $XDG_CACHE_HOME/pax, not the checkout. Also: a mistyped GOOD
    path is `no such file`, not a list of releases, and refused before anything is made."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    bad = write_lock(tmp_path / "bad.txt", {"q00": "1.0"}, index)
    rc = bisect.main(["--good", str(tmp_path / "god.txt"), "--bad", str(bad), "--", "true"])
    err = capsys.readouterr().err
    assert rc == 2 and err == f"pax bisect: error: --good {tmp_path / 'god.txt'}: no such file\n"
    assert not (tmp_path / "xdg").exists()
    good = write_lock(tmp_path / "good.txt", {"q00": "2.0"}, index)
    argv = ["--good", str(good), "--bad", str(bad), "--no-index", "--find-links", str(index)]
    rc = bisect.main([*argv, "--", "python", "-c", "import q00"], log=lambda m: None)
    assert rc == 1  # passes on both: does not reproduce
    assert sorted(p.name for p in (tmp_path / "xdg" / "pax" / "wheels").iterdir()) == [
        "q00-1.0-py3-none-any.whl",
        "q00-2.0-py3-none-any.whl",
    ]
    assert len(list((tmp_path / "xdg" / "pax" / "bisect").iterdir())) == 1


def one_line_error(capsys, rc, out):
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "error" and report["error"] == err.strip().removeprefix(
        "pax bisect: error: "
    )
    return report


def test_command_that_cannot_run(tmp_path, index, cache, capsys):
    good, bad = {"p13": "1.0"}, {"p13": "1.1"}
    # a typo: no package of GOOD installs it, it is not on PATH; found once the wheels are in
    rc, _, _ = run_bisect(tmp_path / "a", index, cache, good, bad, command=["pytset", "-x"])
    report = one_line_error(capsys, rc, tmp_path / "a" / "out")
    assert (
        "COMMAND 'pytset' not found: not on PATH, and no package in GOOD installs it"
        in (report["error"])
    )
    assert report["steps"] == []  # stopped before any env was built
    script = tmp_path / "check.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(FileNotFoundError):  # a path is checked before the output folder is made
        run_bisect(tmp_path / "b", index, cache, good, bad, command=[str(script)])
    err = capsys.readouterr().err
    assert err.startswith(f"pax bisect: error: COMMAND {script} is not executable: chmod +x it")
    assert not (tmp_path / "b" / "out").exists()
    # one word is a shell line: the shell's 127 on GOOD is a missing command (as git bisect
    # run checks on its first run), not a bad verdict
    rc, _, _ = run_bisect(tmp_path / "c", index, cache, good, bad, command=["pytset -x"])
    report = one_line_error(capsys, rc, tmp_path / "c" / "out")
    assert report["error"].startswith("COMMAND exited 127 on GOOD: the shell could not find")
    assert [s["verdict"] for s in report["steps"]] == ["error"]


def test_a_command_the_bad_lock_no_longer_installs(tmp_path, index, cache):
    """COMMAND is a console script of a package BAD drops: found in GOOD, so no input error;
    in BAD it is missing, a bad verdict that says why, and the removal is the culprit."""
    good, bad = {"tool": "1.0", "q00": "1.0"}, {"q00": "2.0"}
    rc, report, text = run_bisect(tmp_path, index, cache, good, bad, command=["toolcmd", "-v"])
    assert rc == 0, text
    assert culprit_names(report) == ["tool"] and report["culprit"][0]["changes"][0]["new"] is None
    missing = [s for s in report["steps"] if s["verdict"] == "bad"]
    assert missing and all("COMMAND 'toolcmd' not found" in s["reason"] for s in missing)
    # through a shell (one word): exit 127, still a bad verdict, with the shell's reason
    rc, report, text = run_bisect(tmp_path / "sh", index, cache, good, bad, command=["toolcmd"])
    assert rc == 0, text
    missing = [s for s in report["steps"] if s["verdict"] == "bad"]
    assert all("exited 127: the shell could not find a command" in s["reason"] for s in missing)


def test_an_interrupted_run_still_writes_its_report(tmp_path, index, cache, monkeypatch):
    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(search.Bisection, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_bisect(tmp_path, index, cache, {"q00": "1.0"}, {"q00": "2.0"})
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (report["status"], report["error"]) == ("error", "interrupted")


def test_wheels_that_cannot_be_had(tmp_path, index, capsys):
    """A hash that does not match, a wheel for another platform, an index that does not
    answer: each stops the run before any env is built."""
    good = write_lock(tmp_path / "good.txt", {"q00": "1.0", "q01": "1.0"}, index)
    lock = good.read_text()
    expected = "sha256:" + "0" * 64
    actual = "sha256:" + sha256(index / "q01-1.0-py3-none-any.whl")
    (tmp_path / "tampered.txt").write_text(lock.replace(actual, expected))
    base = ["--no-index", "--find-links", str(index)]

    def run(name, good_lock, *extra, bad_lock=tmp_path / "bad.txt"):
        out = tmp_path / name
        argv = ["--good", str(good_lock), "--bad", str(bad_lock), "--out", str(out)]
        rc = bisect.main(
            [*argv, "--cache", str(tmp_path / f"cache-{name}"), *extra, "--", "true"],
            log=lambda m: None,
        )
        return one_line_error(capsys, rc, out)

    write_lock(tmp_path / "bad.txt", {"q00": "2.0", "q01": "1.0"}, index)
    report = run("hash", tmp_path / "tampered.txt", *base)
    assert report["error"] == (
        f"hash mismatch for q01==1.0: q01-1.0-py3-none-any.whl from --find-links {index} has "
        f"{actual}, the lock expects {expected}; the index serves another file than the lock "
        "was made from: fetch from the index the lock was made against, or re-lock"
    )
    assert report["steps"] == [] and report["wheel_problems"][0]["actual"] == actual
    # vpkg 1.4 is published only as a py2 wheel
    other = tmp_path / "py2.txt"
    other.write_text(
        lock
        + "vpkg==1.4 \\\n    --hash=sha256:"
        + sha256(index / "vpkg-1.4-py2-none-any.whl")
        + "\n"
    )
    report = run("platform", other, *base)
    assert report["error"].startswith("no wheel of vpkg==1.4 for this platform (CPython 3.")
    assert report["error"].endswith("or add the wheel with --find-links DIR")
    report = run("offline", good, "--index-url", "http://127.0.0.1:9/simple")
    assert report["error"].startswith("index http://127.0.0.1:9/simple is unreachable (")
    assert "--no-index --find-links DIR" in report["error"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--good", "{good}", "--bad", "{good}"], "GOOD and BAD pin the same packages"),
        (["--good", "{good}", "--bad", "{tmp}/bda.txt"], "--bad {tmp}/bda.txt: no such file"),
        (["--good", "{good}", "--bad", "9.9.9"], "unknown release '9.9.9'"),
        (["--good", "{good}", "--bad", "{bad}", "--retries", "-1"], "--retries must be 0"),
    ],
)
def test_bad_input_makes_nothing(tmp_path, index, capsys, argv, message):
    """The command line is checked whole before the output folder or the wheel cache is made."""
    good = write_lock(tmp_path / "good.txt", {"q00": "1.0"}, index)
    bad = write_lock(tmp_path / "bad.txt", {"q00": "2.0"}, index)
    folders = ["--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache")]
    argv = [a.format(good=good, bad=bad, tmp=tmp_path) for a in argv]
    assert bisect.main([*argv, *folders, "--", "true"], log=lambda m: None) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message.format(tmp=tmp_path) in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.txt", "good.txt"]


def test_a_command_that_exits_2_on_good_stops_the_bisect(tmp_path, index, cache, capsys):
    """compare on a mistyped job directory says so (exit 2) at every step: the bisect stops on
    GOOD with its line, instead of judging every candidate bad (or skipping them all)."""
    typo = tmp_path / "runs" / "tiyn"
    command = ["python", "-m", "pax.curves", "compare", str(typo)]
    good, bad = {"p13": "1.0"}, {"p13": "1.1"}
    rc, _, _ = run_bisect(tmp_path, index, cache, good, bad, command=command)
    report = one_line_error(capsys, rc, tmp_path / "out")
    assert report["error"] == (
        f"COMMAND exited 2 (bad input) on GOOD: python -m pax.curves: error: {typo}: no such "
        "job directory; check the path (the --job_log_dir it trained with, the folder holding "
        "config.json and metrics.jsonl); fix the command, then bisect again"
    )
    assert [s["verdict"] for s in report["steps"]] == ["error"]


# Pure parts: no environments.


def change(name, old, new):
    return diff.Change(name, Pin(name, old) if old else None, Pin(name, new) if new else None)


def test_groups_couple_jax_nvidia_and_user_groups():
    changes = [
        change(n, "1", "2")
        for n in (
            "jax",
            "jaxlib",
            "jax-cuda12-plugin",
            "jax-cuda12-pjrt",
            "libtpu",
            "nvidia-cublas-cu12",
            "nvidia-nccl-cu12",
            "numpy",
            "scipy",
            "optax",
        )
    ]
    groups = grouping.make_groups(changes, [["numpy", "SciPy", "not-changed"]], log=lambda m: None)
    by_name = {g.name: sorted(g.names) for g in groups}
    assert by_name == {
        "jax": ["jax", "jax-cuda12-pjrt", "jax-cuda12-plugin", "jaxlib", "libtpu"],
        "nvidia-*-cu12": ["nvidia-cublas-cu12", "nvidia-nccl-cu12"],
        "numpy+scipy": ["numpy", "scipy"],
        "optax": ["optax"],
    }


def test_order_puts_dependencies_first_and_removals_after_their_users():
    changes = [
        change("app", "1", "2"),
        change("lib", "1", "2"),
        change("old", "1", None),
        change("zdep", None, "1"),
    ]
    needs = {("app", "2"): {"zdep", "lib"}, ("app", "1"): {"old"}}
    groups = grouping.make_groups(changes)
    ordered = grouping.order_groups(groups, lambda pin: needs.get((pin.name, pin.version), set()))
    assert [g.name for g in ordered] == ["lib", "zdep", "app", "old"]


def test_index_lists_wheels_of_a_folder_and_a_simple_index(tmp_path, index):
    from pax.environments import index as dist_index
    from pax.lockfile import sha256_file

    in_folder = dist_index.published("VPKG", find_links=[str(index)], no_index=True)
    assert sorted(in_folder) == [
        "1.0",
        "1.1",
        "1.2",
        "1.3",
        "1.4",
        "1.5",
        "1.6",
        "1.6rc1",
        "1.7",
        "2.0",
    ]
    wheel = index / "vpkg-1.5-py3-none-any.whl"
    assert in_folder["1.5"] == (f"sha256:{sha256_file(wheel)}",)
    page = tmp_path / "simple" / "vpkg"  # PEP 503: hashes in the links, yanked files left out
    page.mkdir(parents=True)
    page.joinpath("index.html").write_text(
        '<a href="../../f/vpkg-1.0-py3-none-any.whl#sha256=aa">vpkg-1.0</a>'
        '<a href="../../f/vpkg-1.1-py3-none-any.whl#sha256=bb" data-yanked="">vpkg-1.1</a>'
        '<a href="../../f/vpkg-1.2.tar.gz#sha256=cc">vpkg-1.2.tar.gz</a>'
        '<a href="../../f/vpkg-1.3-py3-none-any.whl">vpkg-1.3</a>'
        '<a href="../../f/other-1.4-py3-none-any.whl#sha256=dd">other</a>'
    )
    listed = dist_index.published("vpkg", index_url=(tmp_path / "simple").as_uri())
    assert listed == {"1.0": ("sha256:aa",), "1.3": ()}


def test_image_lock_and_installed_pax(tmp_path, index, monkeypatch, capsys):
    """`image` is $PAX_LOCKFILE (for diff and bisect); an installed pax reaches COMMAND alone."""
    import subprocess
    import sys

    lock = write_lock(tmp_path / "lock.txt", {"q00": "1.0"}, index)
    monkeypatch.setenv("PAX_LOCKFILE", str(lock))
    monkeypatch.setenv("PAX_IMAGE", "pax:9.9-tpu")
    loaded = diff.load("image", "tpu")
    assert loaded.label == f"image pax:9.9-tpu ({lock})" and list(loaded.pins) == ["q00"]
    monkeypatch.delenv("PAX_LOCKFILE")
    assert bisect.main(["--good", "image", "--bad", str(lock), "--", "true"]) == 2
    assert "$PAX_LOCKFILE" in capsys.readouterr().err

    monkeypatch.setattr(bisect, "checkout", lambda: None)
    root = bisect.import_root(tmp_path / "path")
    assert sorted(p.name for p in root.iterdir()) == ["pax"]
    out = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]);"
            " import pax.lockfile as m; print(m.__file__)",
            str(root),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.startswith(str(root / "pax"))


def test_usage_errors_exit_2(capsys):
    assert bisect.main(["--good", "1.3.0", "--bad", "1.4.0"]) == 2
    assert "COMMAND" in capsys.readouterr().err
    assert bisect.main(["--good", "9.9.9", "--bad", "1.4.0", "--", "true"]) == 2
    assert "unknown release '9.9.9'" in capsys.readouterr().err


def test_imports_without_jax_or_numpy():
    """nox runs these from the tools venv (which has packaging, as every release lock does)."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['jax'] = sys.modules['numpy'] = None\n"
        "import pax.lockfile, pax.releases.diff, pax.bisect.cli, pax.environments.wheelcache\n"
        "assert pax.lockfile.version_key('0.9') < pax.lockfile.version_key('0.10')\n"
    )
    root = str(paths.ROOT)
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=root,
        env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"},
    )
