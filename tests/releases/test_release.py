"""pax.releases.catalog, and the freeze guard over the committed releases."""

import re
import subprocess
import sys
import tomllib

import pytest

from pax import git, lockfile, paths
from pax.releases import catalog as release
from pax.releases import source

ROOT = paths.ROOT
RELEASES = release.list_releases()
PRODUCT_LOCKS = [(r, p) for r in RELEASES for p in release.LOCK_PLATFORMS]
# The test tools' lock wherever a release has one or records one (none up to 1.6.0).
TEST_LOCKS = [
    (r, release.TEST_LOCK) for r in RELEASES if r.test_lock or release.TEST_LOCK in r.meta["locks"]
]
LOCKS = PRODUCT_LOCKS + TEST_LOCKS
TEST_TOOLS = ("pytest", "pytest-xdist", "nbclient", "ipykernel", "jupyter-client", "jsonschema")


@pytest.mark.parametrize(
    "python, suite, image_python",
    [
        ("3.11", "bookworm", "3.11"),
        (["3.12", "3.13"], "trixie", "3.13"),
        (["3.13"], "trixie", "3.13"),
    ],
)
def test_a_release_stands_on_the_suite_whose_python3_it_installs_on(
    tmp_path, python, suite, image_python
):
    rel = release.Release("9.9.9", tmp_path, {"python": python})
    assert (rel.base_suite, rel.image_python) == (suite, image_python)
    assert image_python in rel.pythons


def test_a_release_no_suite_provides_is_named(tmp_path):
    rel = release.Release("9.9.9", tmp_path, {"python": ["3.12"]})
    with pytest.raises(release.NoBaseSuite, match=r"Python 3\.12, which no image base provides"):
        rel.base_suite


def test_a_release_cut_now_stands_on_trixie_and_the_cut_ones_on_the_base_they_record():
    assert release.suite_for(release.CUT_PYTHONS) == "trixie"
    assert release.local_base_image("trixie") == "pax-base:trixie"
    assert release.public_base_image("trixie") == "python:3.13-slim-trixie"
    for rel in RELEASES:
        # 1.8.0 and older, on 3.11: bookworm; 1.9.0 on, on 3.12 and 3.13: trixie
        assert rel.base_suite == ("bookworm" if rel.pythons == ("3.11",) else "trixie"), rel.version
        recorded = rel.meta.get("images", {}).get("base_suite")
        assert recorded in (None, rel.base_suite), rel.version


def test_releases_are_found_oldest_first():
    versions = [r.version for r in RELEASES]
    assert len(versions) >= 2
    assert versions == sorted(versions, key=lockfile.version_key)
    assert release.newest().version == versions[-1]
    assert release.resolve(None).version == versions[-1]


def test_resolve_accepts_branch_and_tag_spellings():
    first = RELEASES[0].version
    assert release.resolve(first).version == first
    assert release.resolve("r" + first).version == first
    assert release.resolve("v" + first).version == first


def test_unknown_release_lists_the_known_ones():
    with pytest.raises(release.UnknownRelease) as err:
        release.resolve("9.9.9")
    message = str(err.value)
    assert "'9.9.9'" in message
    for r in RELEASES:
        assert r.version in message


def test_unknown_release_in_empty_tree(tmp_path):
    with pytest.raises(release.UnknownRelease, match="known releases: none"):
        release.resolve(None, root=tmp_path)


def test_looks_like_release():
    assert release.looks_like_release("1.4.0") and release.looks_like_release("nightly")
    assert not release.looks_like_release("-k") and not release.looks_like_release("tests/releases")


def _being_cut(rel) -> bool:
    """A release whose record git does not hold yet: `./noxw -s release` runs the tests before
    its commits, and its second commit records the source."""
    tracked = subprocess.run(
        ["git", "ls-files", "--error-unmatch", str(rel.dir / "release.toml")],
        cwd=ROOT,
        capture_output=True,
    )
    return tracked.returncode != 0 and "source" not in rel.meta


@pytest.mark.parametrize("rel", RELEASES, ids=lambda r: r.version)
def test_release_toml_is_complete(rel):
    for key in (
        "version",
        "date",
        "branch",
        *(() if _being_cut(rel) else ("source",)),
        "python",
        "base_image",
        "notes",
        "versions",
        "locks",
    ):
        assert key in rel.meta, f"{rel.dir}/release.toml lacks {key}"
    assert rel.meta["branch"] == f"r{rel.version}"
    assert rel.dir.name == rel.version
    assert set(rel.pins) == set(release.HEADLINE)


@pytest.mark.parametrize("rel,platform", LOCKS, ids=lambda x: getattr(x, "version", x))
def test_lock_is_frozen(rel, platform):
    """A cut release's lockfile must hash to what release.toml recorded."""
    lock = rel.lockfile(platform)
    assert lock.is_file(), f"{lock} missing"
    assert rel.lock_sha256(platform) == rel.recorded_sha256(platform), (
        f"{lock} changed after release {rel.version} was cut; releases are frozen "
        "(cut a new release instead, or re-record the sha256 if this is deliberate)"
    )


@pytest.mark.parametrize("rel,platform", LOCKS, ids=lambda x: getattr(x, "version", x))
def test_lock_pins_with_hashes(rel, platform):
    pins = lockfile.parse_lockfile(rel.lockfile(platform))
    if platform in release.LOCK_PLATFORMS:
        assert {n: pins[n].version for n in rel.pins if n in pins} == rel.pins
    assert all(p.hashes for p in pins.values()), "every pin carries hashes"
    text = rel.lockfile(platform).read_text()
    assert "://" not in text and "--index-url" not in text, "no index URLs in a lock"


@pytest.mark.parametrize("rel", RELEASES, ids=lambda r: r.version)
def test_product_locks_hold_the_trainer_and_the_test_lock_the_tools(rel):
    """From the first release with a test lock on, the platform locks hold no test tools and the
    test lock agrees with the cpu lock; before it, the cpu lock held them (the frozen layout)."""
    first = next((r for r, _ in TEST_LOCKS), None)
    cpu = lockfile.versions(lockfile.parse_lockfile(rel.lockfile("cpu")))
    if first is None or lockfile.version_key(rel.version) < lockfile.version_key(first.version):
        assert rel.test_lock is None
        assert "pytest" in cpu, "the older layout's cpu lock holds the test tools"
        return
    assert rel.test_lock is not None, f"{rel.version} has no test.txt, though {first.version} had"
    assert rel.recorded_sha256(release.TEST_LOCK), "release.toml records the test lock"
    for platform in release.LOCK_PLATFORMS:
        pinned = lockfile.versions(lockfile.parse_lockfile(rel.lockfile(platform)))
        assert not set(TEST_TOOLS) & set(pinned), f"{platform}.txt holds test tools"
    tools = lockfile.versions(lockfile.parse_lockfile(rel.test_lock))
    assert set(TEST_TOOLS) <= set(tools)
    rel.check_test_lock()


@pytest.mark.parametrize("rel", RELEASES, ids=lambda r: r.version)
def test_constraints_file_matches_release_toml(rel):
    lines = [ln for ln in rel.constraints_file.read_text().splitlines() if ln and ln[0] != "#"]
    assert dict(ln.split("==") for ln in lines) == rel.pins


@pytest.mark.parametrize("rel", RELEASES, ids=lambda r: r.version)
def test_source_is_in_history_and_holds_the_locks(rel):
    """release.toml's source is a commit of this history whose tree holds the release's locks
    with the sha256 recorded in [locks]: the tree images of the release are built from."""
    if _being_cut(rel):
        pytest.skip(f"{rel.version} is being cut: its second commit records the source")
    rev = source.recorded(rel)
    assert rev and re.fullmatch("[0-9a-f]{40}", rev), f"{rel.dir}/release.toml: source {rev!r}"
    if not source.has_commit(rev):
        if subprocess.run(
            ["git", "rev-parse", "--git-dir"], cwd=ROOT, capture_output=True
        ).returncode:
            pytest.skip("not a git checkout: no history to find the source in")
        if source.is_shallow():
            pytest.skip(f"shallow clone without {rev[:12]}: git fetch --unshallow to check it")
        pytest.fail(f"release {rel.version}'s source {rev} is not in this repository")
    assert source.require(rel) == rev
    ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", rev, "HEAD"], cwd=ROOT)
    assert ancestor.returncode == 0, f"{rev} is not in HEAD's history"
    assert source.lock_sha256s(rel, rev) == rel.meta["locks"]


def test_a_shallow_clone_without_the_source_says_how_to_fetch_it(tmp_path):
    clone = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "--quiet", "--depth=1", f"file://{ROOT}", str(clone)], check=True
    )
    rel = release.resolve("1.4.0", root=clone)
    if source.has_commit(source.recorded(rel), clone):
        pytest.skip("1.4.0's source is HEAD here: nothing to fetch")
    with pytest.raises(source.SourceError, match="shallow: run git fetch --unshallow"):
        source.require(rel, clone)


def test_releases_from_1_7_0_on_carry_their_number_as_the_package_version():
    """The cut sets pyproject.toml's version to the release's (earlier sources said 1.4.0)."""
    for rel in RELEASES:
        rev = source.recorded(rel)
        if lockfile.version_key(rel.version) < lockfile.version_key("1.7.0") or not (
            rev and source.has_commit(rev)
        ):
            continue
        meta = tomllib.loads(git.blob(rev, "pyproject.toml").decode())
        assert meta["project"]["version"] == rel.version, f"{rel.version} at {rev[:12]}"


def test_the_noxfile_imports_without_jax():
    """nox imports the distribution packages from the tools venv, where jax is absent."""
    code = (
        "import sys; sys.modules['jax'] = None; sys.modules['numpy'] = None\n"
        "import nox, runpy; runpy.run_path('noxfile.py')\n"
    )
    root = str(paths.ROOT)
    tools = paths.TOOLS_VENV / "bin" / "python"
    if not tools.exists():
        pytest.skip("no .tools/venv: run the tests through ./noxw, which makes it")
    subprocess.run([tools, "-c", code], check=True, cwd=root, env={"PATH": "/usr/bin:/bin"})


def test_the_package_version_is_the_newest_release():
    """The cut sets pyproject's version to the release it cuts, and pax.__version__ reads it."""
    import pax

    assert pax.__version__ == release.newest().version


def _releases(root, pythons):
    for version, python in pythons.items():
        directory = root / "releases" / version
        directory.mkdir(parents=True)
        (directory / "release.toml").write_text(f"python = {python!r}\n".replace("'", '"'))


def test_the_default_release_is_the_newest_this_machine_has_a_python_for(tmp_path, capsys):
    running = "%d.%d" % sys.version_info[:2]
    _releases(tmp_path, {"1.0.0": running, "2.0.0": ["3.98", "3.99"]})
    assert release.resolve(None, tmp_path).version == "1.0.0"
    note = capsys.readouterr().err.strip()
    assert note == (
        f"note: release 2.0.0 needs Python 3.98 or 3.99, which this machine lacks; taking 1.0.0, "
        f"the newest for Python {running} (name a release to choose)"
    )
    assert release.resolve("2.0.0", tmp_path).version == "2.0.0"  # named: taken as asked


def test_the_newest_release_is_the_default_where_its_python_is_found(tmp_path, capsys):
    running = "%d.%d" % sys.version_info[:2]
    _releases(tmp_path, {"1.0.0": "3.99", "2.0.0": ["3.98", running]})
    assert release.resolve(None, tmp_path).version == "2.0.0"
    assert capsys.readouterr().err == ""
