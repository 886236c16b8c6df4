"""pax.bisect over a hermetic index: tiny wheels built on the fly, lockfiles over them.

No network: wheels come from a local folder (`--no-index --find-links`), through the shared,
hash-verified wheel cache, into venvs built with `--no-deps`. The scenario (packages, and
COMMAND `python check.py`) is tests/bisect/wheels.py's.
"""

import json
import math

import pytest

from pax.bisect import cli as bisect
from pax.bisect import groups as grouping
from pax.bisect import report, search
from pax.releases import diff
from pax.releases.lockfile import Pin
from tests.bisect.wheels import build_index, write_lock


@pytest.fixture(scope="session")
def index(tmp_path_factory):
    return build_index(tmp_path_factory.mktemp("index"))


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("wheel-cache")


LOG = None  # a callable to see progress while debugging


def run_bisect(tmp_path, index, cache, good, bad, *extra, command=None):
    good_lock = write_lock(tmp_path / "good.txt", good, index)
    bad_lock = write_lock(tmp_path / "bad.txt", bad, index)
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
    return math.ceil(math.log2(n)) + 3


def test_one_culprit_among_many(tmp_path, index, cache):
    good = {**{f"p{i:02d}": "1.0" for i in range(22)}, "gone": "1.0"}
    bad = {**{f"p{i:02d}": "1.1" for i in range(22)}, "fresh": "1.0"}
    rc, report, text = run_bisect(tmp_path, index, cache, good, bad)
    assert rc == 0, text
    assert culprit_names(report) == ["p13"]
    assert report["alone"] == "bad" and not report["interaction"]
    n = len(report["groups"])
    assert n == 24
    assert report["env_builds"] <= bound(n), text
    assert "p13 1.0 -> 1.1" in text and "p13 1.1 is broken" in text  # culprit + bad env's tail
    assert {b["kind"] for b in report["builds"]} == {"cold", "warm"}
    assert len((tmp_path / "out" / "steps.jsonl").read_text().splitlines()) == report["env_builds"]


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


def test_two_changes_that_break_only_together(tmp_path, index, cache):
    good = {"alpha": "1", "beta": "1", **{f"r{i:02d}": "1" for i in range(8)}}
    bad = {"alpha": "2", "beta": "2", **{f"r{i:02d}": "2" for i in range(8)}}
    rc, report, text = run_bisect(tmp_path, index, cache, good, bad)
    assert rc == 0, text
    assert report["interaction"] and report["culprit_confirmed"]
    assert culprit_names(report) == ["alpha", "beta"]
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
    skipped = [s for s in report["steps"] if s["verdict"] == "skip"]
    assert skipped and all("pip check failed" in s["reason"] for s in skipped)
    assert "m-user 1 has requirement m-core<2" in skipped[0]["reason"]
    assert "skipped" in text and "pip check failed" in text
    assert report["env_builds"] <= bound(9) + len(skipped)


def test_flaky_command_with_retries(tmp_path, index, cache, monkeypatch):
    monkeypatch.setenv("FLAKY_COUNTER", str(tmp_path / "counter"))
    good = {f"p{i:02d}": "1.0" for i in range(11, 16)}
    bad = {f"p{i:02d}": "1.1" for i in range(11, 16)}
    rc, report, text = run_bisect(tmp_path, index, cache, good, bad, "--retries", "2")
    assert rc == 0, text
    assert culprit_names(report) == ["p13"]
    assert any(s["reason"].startswith("flaky") for s in report["steps"])


def test_versions_names_the_first_bad_release(tmp_path, index, cache):
    good, bad = {"vpkg": "1.0", "q00": "1.0"}, {"vpkg": "2.0", "q00": "1.0"}
    rc, report, text = run_bisect(tmp_path, index, cache, good, bad, "--versions")
    assert rc == 0, text
    assert culprit_names(report) == ["vpkg"]
    walk = report["versions"]
    assert walk["between"] == ["1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7"]
    assert (walk["status"], walk["last_good"], walk["first_bad"]) == ("found", "1.5", "1.6")
    assert "pip check failed" in walk["skipped"]["1.3"]
    assert "no wheel" in walk["skipped"]["1.4"]
    # ceil(log2 8) = 3 probes, plus one for each skipped release
    assert walk["env_builds"] <= walk["bound"] + len(walk["skipped"]) == 5
    pinned = [s["pin"] for s in report["steps"] if s["pin"]]
    assert len(pinned) == walk["env_builds"] and "vpkg==1.6" in pinned
    assert "first bad release: vpkg 1.6 (last good: 1.5;" in text


def test_versions_needs_one_package_that_breaks_alone():
    changes = [change("jax", "0.1", "0.2"), change("jaxlib", "0.1", "0.2"), change("q00", "1", "2")]
    groups = grouping.make_groups(changes)
    lock = diff.Lock("x", {}, "")
    bis = search.Bisector(lock, lock, groups, ["true"], None, None, log=lambda m: None)
    found = {"status": "found", "alone": "bad"}
    bis.culprit = [0]  # jax + jaxlib
    walk = bis.walk_versions(found, published=lambda name: {})
    assert walk["status"].startswith("skipped: the culprit is a group of 2 packages")
    assert report._versions_lines(walk) == [f"  --versions {walk['status']}"]
    bis.culprit = [1]
    assert (
        "one culprit that breaks alone"
        in bis.walk_versions({**found, "alone": "good"}, published=lambda name: {})["status"]
    )


def test_endpoints_that_do_not_reproduce(tmp_path, index, cache):
    good = {"q00": "1.0", "q01": "1.0"}
    bad = {"q00": "2.0", "q01": "2.0"}
    rc, report, text = run_bisect(tmp_path, index, cache, good, bad)
    assert rc == 1
    assert report["status"].startswith("endpoints do not reproduce: COMMAND does not fail on BAD")
    assert report["env_builds"] == 2 and report["culprit"] is None
    (tmp_path / "x").mkdir()
    rc, report, text = run_bisect(
        tmp_path / "x", index, cache, good, bad, command=["python", "-c", "raise SystemExit(3)"]
    )
    assert rc == 1 and "does not pass on GOOD" in report["status"]
    assert report["env_builds"] == 1


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


@pytest.mark.parametrize("bad_from", [1, 5, 17, 31, 32])
def test_search_takes_log2_steps(bad_from):
    states = list(range(33))
    asked = []

    def verdict(state):
        asked.append(state)
        return "bad" if state >= bad_from else "good"

    lo, hi, skipped = search.search(states, verdict)
    assert (lo, hi, skipped) == (bad_from - 1, bad_from, [])
    assert len(asked) <= math.ceil(math.log2(32))


def test_search_works_around_skips():
    lo, hi, skipped = search.search(
        list(range(9)), lambda s: "skip" if s in (4, 5) else "bad" if s >= 5 else "good"
    )
    assert (lo, hi, skipped) == (3, 6, [4, 5])  # 5 is bad but skipped: 4..5 unresolved


def test_majority():
    assert search.majority(["good"], 1) == "good"
    assert search.majority(["good", "bad"], 3) is None
    assert search.majority(["good", "bad", "bad"], 3) == "bad"
    assert search.majority(["good", "bad"], 2) is None


def test_index_lists_wheels_of_a_folder_and_a_simple_index(tmp_path, index):
    from pax.environments import index as dist_index
    from pax.releases.lockfile import sha256_file

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
            " import pax.releases.lockfile as m; print(m.__file__)",
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

    from pax.releases import catalog as release

    code = (
        "import sys; sys.modules['jax'] = sys.modules['numpy'] = None\n"
        "import pax.releases.diff, pax.bisect.cli, pax.environments.wheelcache\n"
        "assert pax.releases.diff.compare_versions('0.9', '0.10') == -1\n"
    )
    root = str(release.REPO_ROOT)
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=root,
        env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"},
    )
