"""pax.environments.test_runner: the xdist plugin beside a release env, and when it is used."""

import pytest

from pax import lockfile
from pax.environments import test_runner


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
    assert test_runner.pytest_args(args, cores) == expected


def test_the_plugin_lock_is_hashed_and_leaves_pytest_to_the_release():
    pins = lockfile.parse_lockfile(test_runner.LOCK)
    assert set(lockfile.versions(pins)) == {"pytest-xdist", "execnet"}
    assert all(pin.hashes for pin in pins.values())


def test_the_session_puts_the_plugin_after_the_checkout(tmp_path):
    from pax.environments.venv import Env
    from pax.releases.catalog import Release

    env = Env(Release("9.9.9", tmp_path, {}), "cpu", tmp_path / "pax-9.9.9-cpu", tmp_path, "0")
    runner = test_runner.path(env)
    assert runner.name == "pax-9.9.9-cpu.test-runner"
    path = test_runner.session_env(env, runner)["PYTHONPATH"].split(":")
    assert path[-1] == str(runner) and len(path) == 2
