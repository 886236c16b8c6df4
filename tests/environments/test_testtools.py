"""pax.environments.testtools: the test tools beside a release env (its test lock less its cpu
lock, or the xdist lock for releases without one), how that folder is made, when workers run."""

import hashlib
import os
import subprocess
import sys

import pytest

from pax import lockfile
from pax.environments import testtools
from pax.releases import catalog


@pytest.mark.parametrize(
    "args, cores, expected",
    [
        ([], 2, ["-n", "2", "--dist", "loadfile"]),
        (["--full", "-m", "slow"], 16, ["-n", "4", "--dist", "loadfile"]),  # capped
        ([], 1, []),  # one core: no workers to start
        (["-n", "0"], 8, []),  # the caller's choice stands
        (["--numprocesses=3"], 8, []),
        (["-p", "no:xdist"], 8, []),
        (["--pdb", "tests/docs"], 8, []),  # a debugger needs the test in this process
    ],
)
def test_workers_unless_the_caller_chose(args, cores, expected):
    assert testtools.pytest_args(args, cores) == expected


def test_the_plugin_lock_is_hashed_and_leaves_pytest_to_the_release():
    pins = lockfile.parse_lockfile(testtools.LOCK)
    assert set(lockfile.versions(pins)) == {"pytest-xdist", "execnet"}
    assert all(pin.hashes for pin in pins.values())


def test_the_session_puts_the_plugin_after_the_checkout(tmp_path):
    from pax.environments.venv import Env
    from pax.releases.catalog import Release

    env = Env(Release("9.9.9", tmp_path, {}), "cpu", tmp_path / "pax-9.9.9-cpu", tmp_path, "0")
    runner = testtools.path(env)
    assert runner.name == "pax-9.9.9-cpu.test-runner"
    path = testtools.session_env(env, runner)["PYTHONPATH"].split(":")
    assert path[-1] == str(runner) and len(path) == 2


def write_lock(path, versions):
    digest = {n: hashlib.sha256(f"{n}{v}".encode()).hexdigest() for n, v in versions.items()}
    lines = [f"{n}=={v} \\\n    --hash=sha256:{digest[n]}" for n, v in versions.items()]
    path.write_text("\n".join(lines) + "\n")


def scratch_env(tmp_path, tools=None):
    """A cpu env's paths for a release whose cpu lock pins jax and numpy; `tools`: its test lock."""
    from pax.environments.venv import Env
    from pax.releases.catalog import Release

    directory = tmp_path / "releases" / "9.9.9"
    directory.mkdir(parents=True, exist_ok=True)
    write_lock(directory / "cpu.txt", {"jax": "1.0", "numpy": "2.0"})
    if tools is not None:
        write_lock(directory / "test.txt", tools)
    release = Release("9.9.9", directory, {})
    venvs = tmp_path / ".venv"
    return Env(release, "cpu", venvs / "pax-9.9.9-cpu", directory / "cpu.txt", "0")


class FakeInstall:
    """Stands in for uv/pip: writes a dist-info per requirement into the target folder."""

    def __init__(self, fail=False):
        self.calls, self.fail = [], fail

    def __call__(self, python, requirements_file, target):
        names = sorted(lockfile.versions(lockfile.parse_lockfile(requirements_file)))
        self.calls.append(names)
        for name in names:
            (target / f"{name}.dist-info").mkdir()
        if self.fail:
            raise subprocess.CalledProcessError(2, ["uv", "pip", "install"])
        return "fake"


TOOLS = {"pytest": "9.0", "nbclient": "0.11", "numpy": "2.0"}


def test_the_test_lock_less_the_cpu_lock_goes_beside_the_env(tmp_path):
    env = scratch_env(tmp_path, TOOLS)
    pins = lockfile.parse_lockfile_text(testtools.requirements(env))
    assert sorted(pins) == ["nbclient", "pytest"]  # numpy is the env's own, at the same version
    assert all(pin.hashes for pin in pins.values())
    fake = FakeInstall()
    runner = testtools.ensure(env, log=lambda *_: None, install=fake)
    assert runner == testtools.path(env) and fake.calls == [["nbclient", "pytest"]]
    assert (runner / "pytest.dist-info").is_dir() and not (runner / "numpy.dist-info").exists()
    assert testtools.ensure(env, log=lambda *_: None, install=fake) == runner
    assert len(fake.calls) == 1, "an unchanged folder is reused"
    write_lock(env.release.test_lock, {**TOOLS, "pytest": "9.1"})
    testtools.ensure(env, log=lambda *_: None, install=fake)
    assert len(fake.calls) == 2, "a changed test lock is installed again"


def test_a_test_lock_that_disagrees_with_the_cpu_lock_installs_nothing(tmp_path):
    env = scratch_env(tmp_path, {**TOOLS, "numpy": "1.26"})
    fake = FakeInstall()
    with pytest.raises(catalog.TestLockMismatch) as err:
        testtools.ensure(env, log=lambda *_: None, install=fake)
    assert str(err.value).count("\n") == 0 and "numpy 1.26 (cpu.txt 2.0)" in str(err.value)
    assert "./noxw -s lock -- 9.9.9 cpu test" in str(err.value)
    assert fake.calls == [] and not testtools.path(env).exists()
    with pytest.raises(RuntimeError):  # what the test and tutorial sessions turn into one line
        testtools.prepare(env, log=lambda *_: None)


def test_a_release_without_a_test_lock_gets_the_xdist_lock(tmp_path):
    env = scratch_env(tmp_path)
    assert env.release.test_lock is None
    assert testtools.requirements(env) == testtools.LOCK.read_text()
    fake = FakeInstall()
    runner = testtools.ensure(env, log=lambda *_: None, install=fake)
    assert fake.calls == [["execnet", "pytest-xdist"]] and (runner / testtools.STAMP).is_file()


def test_a_partial_or_unstamped_folder_is_replaced_whole(tmp_path):
    env = scratch_env(tmp_path, TOOLS)
    runner = testtools.path(env)
    partial = runner.with_name(runner.name + ".partial")
    partial.mkdir(parents=True)
    (partial / "half-written").write_text("")  # an install killed half way
    runner.mkdir()
    (runner / "stale.dist-info").mkdir()  # a folder with no stamp: not known to be whole
    fake = FakeInstall()
    testtools.ensure(env, log=lambda *_: None, install=fake)
    assert len(fake.calls) == 1 and not partial.exists()
    assert sorted(p.name for p in runner.iterdir()) == [
        "nbclient.dist-info",
        "pytest.dist-info",
        testtools.STAMP,
        testtools.INSTALLED,
    ]


def test_a_failed_install_keeps_the_folder_there_was(tmp_path):
    env = scratch_env(tmp_path, TOOLS)
    runner = testtools.ensure(env, log=lambda *_: None, install=FakeInstall())
    stamp = (runner / testtools.STAMP).read_text()
    write_lock(env.release.test_lock, {**TOOLS, "pytest": "9.1"})
    with pytest.raises(testtools.ToolsError, match="installing the test tools beside pax-9.9.9"):
        testtools.ensure(env, log=lambda *_: None, install=FakeInstall(fail=True))
    assert (runner / testtools.STAMP).read_text() == stamp
    assert (runner / "pytest.dist-info").is_dir()


def test_jupyter_execute_runs_from_the_env_or_the_folder():
    """The tutorial's command: nbclient's own entry point, wherever nbclient is importable."""
    pytest.importorskip("nbclient")
    done = subprocess.run(
        [sys.executable, *testtools.JUPYTER_EXECUTE, "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "--inplace" in done.stdout + done.stderr


def test_the_test_sessions_pytest_arguments(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tests").mkdir()
    assert testtools.pytest_argv(["-q"], cores=4) == [
        "tests",
        "-n",
        "4",
        "--dist",
        "loadfile",
        "-q",
    ]
    assert testtools.pytest_argv(["tests::test_x", "-x"], cores=1) == ["tests::test_x", "-x"]
    on_chip = testtools.pytest_argv(["-k", "mesh"], "tpu", cores=8)
    assert on_chip == ["tests", "-m", "accelerator", "--full", "-p", "no:xdist", "-k", "mesh"]


def test_the_checkouts_packages_get_bytecode_where_python_is_told_to_write_none(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    for package in testtools.CHECKOUT_PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "mod.py").write_text("X = 1\n")
    (tmp_path / "pax" / "broken.py").write_text("def (\n")
    (tmp_path / "outside.py").write_text("X = 1\n")
    testtools.compile_checkout([sys.executable, sys.executable], root=tmp_path)
    tag = sys.implementation.cache_tag
    pycs = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.pyc"))
    # Each package's module, once; not the file that does not compile, nor what lies outside.
    assert pycs == [f"{p}/__pycache__/mod.{tag}.pyc" for p in sorted(testtools.CHECKOUT_PACKAGES)]
    # The interpreter loads that bytecode (`-v` says so) instead of compiling the source again.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-v", "-c", "import pax.mod"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"code object from '{tmp_path}/pax/__pycache__/mod.{tag}.pyc'" in out.stderr
