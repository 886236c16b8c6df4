"""pax.releases.cut: cutting a release, in a scratch clone of this repo with a fake lock compile.

Nothing here touches the real repository's branches, tags or files: every test clones the
committed tree into tmp_path (origin removed), and the network-heavy pip-compile is replaced
by `fake_compile`, which writes a small hash-pinned lockfile.
"""

import datetime as dt
import hashlib
import os
import signal
import subprocess
import sys
import tomllib

import pytest

from pax import lockfile, paths
from pax.releases import catalog as release
from pax.releases import cut, readme, source

ROOT = paths.ROOT
NEWEST = {
    "jax": "9.1.0",
    "jaxlib": "9.1.0",
    "flax": "9.2.0",
    "optax": "9.3.0",
    "orbax-checkpoint": "9.4.0",
    "tensorstore": "9.5.0",
    "numpy": "9.6.0",
}
NOW = dt.datetime(2027, 3, 4, 5, 6, 7, tzinfo=dt.timezone.utc)


def git(repo, *args):
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


def refs(repo):
    return set(git(repo, "for-each-ref", "--format=%(refname)").splitlines())


@pytest.fixture(scope="module")
def real_refs():
    """The real repo's refs before any test here ran (each test checks they are unchanged)."""
    return refs(ROOT)


@pytest.fixture
def clone(tmp_path, real_refs):
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(repo)], check=True)
    git(repo, "remote", "remove", "origin")
    git(repo, "config", "user.name", "Release Test")
    git(repo, "config", "user.email", "release-test@example.invalid")
    yield repo
    assert refs(ROOT) == real_refs, "a test changed the real repository's branches or tags"


class FakeCompile:
    """Stands in for pax.releases.compile.compile_one: writes releases/<v>/<platform>.txt, no index."""

    def __init__(self, fail_on=None, lagging=None):
        # lagging: what a platform's resolution takes, unpinned, below the newest (its jax
        # extra wanting a libtpu the index lacks)
        self.calls, self.fail_on, self.lagging = [], fail_on, lagging or {}

    def __call__(self, rel, platform, root):
        self.calls.append((platform, dict(rel.pins), rel.resolved_before))
        if platform == self.fail_on:
            raise RuntimeError(
                f"pip-compile {rel.version} {platform} failed:\nResolutionImpossible"
            )
        versions = {**NEWEST, **({} if rel.pins else self.lagging.get(platform, {})), **rel.pins}
        lines = [f"# fake lock of {rel.version} {platform}"]
        for name, version in sorted(versions.items()):
            digest = hashlib.sha256(f"{name}{version}{platform}".encode()).hexdigest()
            lines.append(f"{name}=={version} \\\n    --hash=sha256:{digest}")
        rel.lockfile(platform).write_text("\n".join(lines) + "\n")
        return lockfile.sha256_file(rel.lockfile(platform)), 0.0, "new"


def do_cut(repo, version="9.0.0", **kwargs):
    kwargs.setdefault("compile", FakeCompile())
    kwargs.setdefault("skip_tests", True)
    return cut.cut(version, repo, now=NOW, log=lambda *_: None, **kwargs)


def test_the_pins_are_the_newest_set_every_platform_resolves(clone):
    lag = {"jax": "9.0.5", "jaxlib": "9.0.5"}
    rel = do_cut(clone, compile=FakeCompile(lagging={"tpu": lag}))
    assert rel.pins == {n: v for n, v in {**NEWEST, **lag}.items() if n in release.HEADLINE}
    for platform in release.LOCK_PLATFORMS:
        assert rel.lock(platform).versions["jax"] == "9.0.5"


def test_cut_writes_locks_pins_tables_commit_branch_and_tag(clone):
    fake = FakeCompile()
    before = git(clone, "rev-parse", "HEAD")
    rel = do_cut(clone, compile=fake)

    directory = clone / "releases" / "9.0.0"
    assert sorted(p.name for p in directory.iterdir()) == [
        "constraints.txt",
        "cpu.txt",
        "gpu.txt",
        "release.toml",
        "test.txt",
        "tpu.txt",
    ]
    meta = tomllib.loads((directory / "release.toml").read_text())
    assert meta["version"] == "9.0.0" and meta["branch"] == "r9.0.0"
    assert meta["date"] == NOW.astimezone().date()
    assert meta["python"] == list(release.CUT_PYTHONS)  # a new release: Python 3.12 and later
    assert meta["base_image"] == "pax-base:trixie"  # what the images are built on: python3 3.13
    assert meta["image_recipe"] == "source"  # and by whom: the release's own tree, for good
    assert meta["resolved_before"] == NOW
    assert meta["notes"].strip()
    # The headline versions are those the unpinned cpu compile resolved, numpy is not one.
    assert meta["versions"] == {n: NEWEST[n] for n in release.HEADLINE}
    for platform in release.LOCKS:
        assert meta["locks"][platform] == lockfile.sha256_file(directory / f"{platform}.txt")
    constraints = [
        ln for ln in (directory / "constraints.txt").read_text().splitlines() if ln and ln[0] != "#"
    ]
    assert dict(ln.split("==") for ln in constraints) == meta["versions"]
    loaded = release.resolve("9.0.0", root=clone)
    assert loaded.pins == rel.pins == meta["versions"]
    assert loaded.resolved_before == "2027-03-04T05:06:07Z"

    # First the cpu lock without pins, then all three with the pins and the test tools' lock
    # after them (the cpu lock constrains it); all at the cut-off.
    unpinned = len(release.LOCK_PLATFORMS)
    assert sorted(fake.calls[:unpinned]) == [
        (p, {}, "2027-03-04T05:06:07Z") for p in sorted(release.LOCK_PLATFORMS)
    ]
    assert sorted(c[0] for c in fake.calls[unpinned:]) == sorted(release.LOCKS)
    assert fake.calls[-1][0] == release.TEST_LOCK
    pinned = fake.calls[unpinned:]
    assert all(c[1] == meta["versions"] and c[2] == "2027-03-04T05:06:07Z" for c in pinned)

    # The cut commit holds the release, the refreshed tables and the package's new version; a
    # second commit records it as the release's source. Branch and tag point at the cut commit.
    cut_commit = git(clone, "rev-parse", "HEAD~1")
    assert git(clone, "rev-parse", "HEAD~2") == before
    assert git(clone, "log", "-1", "--format=%s", "HEAD~1") == "release 9.0.0"
    committed = set(git(clone, "show", "--name-only", "--format=", "HEAD~1").splitlines())
    assert {
        f"releases/9.0.0/{n}"
        for n in ("release.toml", "constraints.txt", "cpu.txt", "tpu.txt", "gpu.txt", "test.txt")
    } <= committed
    assert {"releases/README.md", "pyproject.toml"} <= committed
    project = tomllib.loads(git(clone, "show", f"{cut_commit}:pyproject.toml"))["project"]
    assert project["version"] == "9.0.0"
    assert git(clone, "show", "--name-only", "--format=", "HEAD") == "releases/9.0.0/release.toml"
    assert meta["source"] == rel.meta["source"] == cut_commit
    assert release.resolve("9.0.0", root=clone).meta["source"] == cut_commit
    assert source.lock_sha256s(rel, cut_commit, root=clone) == meta["locks"]
    assert git(clone, "rev-parse", "r9.0.0") == cut_commit
    assert git(clone, "rev-parse", "v9.0.0^{commit}") == cut_commit
    assert git(clone, "cat-file", "-t", "v9.0.0") == "tag"  # annotated
    assert git(clone, "status", "--porcelain") == ""

    table = readme.releases_table(clone)
    assert "| 9.0.0 | 2027-03-0" in table and "| r9.0.0 | 9.1.0 / 9.1.0 | 9.2.0 |" in table
    for path in readme.marked_files(clone):
        assert readme.blocks(path.read_text()) == [f"\n\n{table}\n\n"] * len(
            readme.blocks(path.read_text())
        ), path


def test_the_cut_records_its_images_in_a_third_commit(clone):
    """The images are built from the cut commit, so their IDs land in a commit after it."""
    calls = []

    def record(version, base_image):
        calls.append((version, base_image))
        toml = clone / "releases" / version / "release.toml"
        head, _, locks = toml.read_text().partition("\n[locks]")
        toml.write_text(f'{head}\n\n[images]\ntpu = "sha256:{"1" * 64}"\n\n[locks]{locks}')

    rel = do_cut(clone, record_images=record)
    assert calls == [("9.0.0", "pax-base:trixie")]
    assert rel.meta["images"]["tpu"] == "sha256:" + "1" * 64
    assert git(clone, "log", "-1", "--format=%s") == "release 9.0.0: image IDs"
    assert (
        git(clone, "rev-parse", "r9.0.0") == rel.meta["source"] == git(clone, "rev-parse", "HEAD~2")
    )
    assert git(clone, "status", "--porcelain") == ""


def test_a_cut_whose_images_cannot_be_built_says_how_to_record_them_later(clone):
    def record(version, base_image):
        raise RuntimeError("no Docker engine answers")

    with pytest.raises(cut.CutError, match=r"not recorded \(no Docker engine.*--record-images$"):
        do_cut(clone, record_images=record)
    rel = release.resolve("9.0.0", root=clone)
    assert "images" not in rel.meta and rel.meta["source"]  # cut, source recorded


def test_cut_runs_the_tests_against_the_new_release(clone):
    seen = []

    def run_tests(version, root, log):
        seen.append((version, root, (root / "releases" / version / "cpu.txt").is_file()))
        return 0

    do_cut(clone, skip_tests=False, run_tests=run_tests)
    assert seen == [("9.0.0", clone.resolve(), True)]


def assert_nothing_left(repo, head):
    assert not (repo / "releases" / "9.0.0").exists()
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "rev-parse", "HEAD") == head
    assert not any(r.endswith("9.0.0") for r in refs(repo))


def test_failing_tests_leave_nothing(clone):
    head = git(clone, "rev-parse", "HEAD")
    with pytest.raises(cut.CutError, match="tests failed against 9.0.0 .exit 3.; nothing"):
        do_cut(clone, skip_tests=False, run_tests=lambda version, root, log: 3)
    assert_nothing_left(clone, head)


def test_sigterm_during_the_cut_leaves_nothing(clone):
    head = git(clone, "rev-parse", "HEAD")
    before = signal.getsignal(signal.SIGTERM)

    def killed(version, root, log):
        os.kill(os.getpid(), signal.SIGTERM)
        return 0

    with pytest.raises(cut.CutError, match="terminated .SIGTERM.; nothing was committed"):
        do_cut(clone, skip_tests=False, run_tests=killed)
    assert_nothing_left(clone, head)
    assert signal.getsignal(signal.SIGTERM) == before


def test_failing_compile_leaves_nothing(clone):
    head = git(clone, "rev-parse", "HEAD")
    with pytest.raises(RuntimeError, match="pip-compile 9.0.0 gpu failed"):
        do_cut(clone, compile=FakeCompile(fail_on="gpu"))
    assert_nothing_left(clone, head)


@pytest.mark.parametrize("version", ["1.5", "v1.5.0", "1.5.0rc1", "1.5.0.1", "x.y.z", ""])
def test_refuses_a_version_that_is_not_x_y_z(clone, version):
    with pytest.raises(cut.CutError, match="must be X.Y.Z") as err:
        do_cut(clone, version)
    assert err.value.exit_code == 2


def test_refuses_an_existing_release(clone):
    existing = release.newest(clone).version
    head = git(clone, "rev-parse", "HEAD")
    fake = FakeCompile()
    with pytest.raises(
        cut.CutError, match=f"releases/{existing} exists already; releases are frozen"
    ):
        do_cut(clone, existing, compile=fake)
    assert fake.calls == [] and git(clone, "rev-parse", "HEAD") == head
    assert git(clone, "status", "--porcelain") == ""


@pytest.mark.parametrize("ref", ["branch r9.0.0", "tag v9.0.0"])
def test_refuses_an_existing_branch_or_tag(clone, ref):
    kind, name = ref.split()
    git(clone, kind, name)
    with pytest.raises(cut.CutError, match=f"{kind} {name} exists already"):
        do_cut(clone)
    assert not (clone / "releases" / "9.0.0").exists()


@pytest.mark.parametrize("how", ["modified", "untracked", "staged"])
def test_refuses_a_dirty_tree(clone, how):
    fake = FakeCompile()
    if how == "modified":
        (clone / "README.md").write_text((clone / "README.md").read_text() + "\nedit\n")
    elif how == "untracked":
        (clone / "scratch.txt").write_text("x\n")
    else:
        (clone / "scratch.txt").write_text("x\n")
        git(clone, "add", "scratch.txt")
    with pytest.raises(
        cut.CutError, match="the git tree is dirty .1 path.s.: (README.md|scratch.txt)"
    ):
        do_cut(clone, compile=fake)
    assert fake.calls == [] and not (clone / "releases" / "9.0.0").exists()


def test_command_line_refusals_are_one_line(clone):
    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "pax.releases", "cut", *args],
            cwd=clone,
            capture_output=True,
            text=True,
            env={"PYTHONPATH": str(clone), "PATH": "/usr/bin:/bin"},
        )

    exists = run(release.newest(clone).version, "--skip-tests")
    assert exists.returncode == 1 and exists.stdout == ""
    assert exists.stderr.count("\n") == 1 and "exists already" in exists.stderr
    bad = run("1.5")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "X.Y.Z" in bad.stderr
    assert run("1.4.0", "--recreate").returncode == 0
    git(clone, "tag", "-f", "v1.4.0", "HEAD")
    moved = run("1.4.0", "--recreate")
    assert moved.returncode == 1 and moved.stderr.count("\n") == 1
    assert "tag v1.4.0 points at" in moved.stderr


def test_recreate_puts_branch_and_tag_back_at_the_source(clone):
    rel = do_cut(clone)
    rev = rel.meta["source"]
    git(clone, "branch", "-D", "r9.0.0")
    git(clone, "tag", "-d", "v9.0.0")
    assert cut.cut_from_args(["9.0.0", "--recreate"], clone, log=lambda *_: None) == rev
    assert git(clone, "rev-parse", "r9.0.0") == git(clone, "rev-parse", "v9.0.0^{commit}") == rev
    assert cut.cut_from_args(["9.0.0", "--recreate"], clone, log=lambda *_: None) == rev  # no-op
    # A release already cut, on a clone that never had its branch or tag.
    old = release.resolve("1.4.0", root=clone).meta["source"]
    source.recreate("1.4.0", clone, log=lambda *_: None)
    assert git(clone, "rev-parse", "r1.4.0") == git(clone, "rev-parse", "v1.4.0^{commit}") == old


@pytest.mark.parametrize("kind", ["branch", "tag"])
def test_recreate_refuses_a_branch_or_tag_pointing_elsewhere(clone, kind):
    do_cut(clone)
    name = "r9.0.0" if kind == "branch" else "v9.0.0"
    git(clone, kind, "-f", name, "HEAD")
    with pytest.raises(cut.CutError, match=f"{kind} {name} points at .*, not its source"):
        cut.cut_from_args(["9.0.0", "--recreate"], clone, log=lambda *_: None)


def test_recreate_refuses_a_release_without_a_recorded_source(clone):
    toml = clone / "releases" / "1.4.0" / "release.toml"
    toml.write_text("".join(ln for ln in toml.read_text().splitlines(True) if "source" not in ln))
    with pytest.raises(cut.CutError, match="1.4.0 names no source commit"):
        cut.cut_from_args(["1.4.0", "--recreate"], clone, log=lambda *_: None)
    with pytest.raises(cut.CutError, match="unknown release '9.9.9'"):
        cut.cut_from_args(["9.9.9", "--recreate"], clone, log=lambda *_: None)


def test_with_package_version_sets_the_project_version_only():
    text = '[build-system]\nversion = "x"\n\n[project]\nname = "pax"\nversion = "1.6.0"\n'
    assert cut.with_package_version(text, "1.7.0") == text.replace('"1.6.0"', '"1.7.0"')
    with pytest.raises(cut.CutError, match="no .project. version"):
        cut.with_package_version('[project]\nname = "pax"\n[tool.x]\nversion = "1"\n', "1.7.0")


def test_cut_and_readme_import_without_jax():
    code = (
        "import sys; sys.modules['jax'] = None; sys.modules['numpy'] = None\n"
        "import pax.releases.cut, pax.releases.readme\n"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
