"""pax.environments.venv: an environment built from its lock and compared with it."""

import dataclasses
import os
import sys
from pathlib import Path

import pytest

from pax import envinfo, lockfile
from pax.environments import sessions, testtools, venv
from pax.launch import xla_flags
from pax.pip import pip_env
from pax.releases.catalog import Release


def test_pip_env_ignores_machine_pip_settings():
    env = pip_env(
        {
            "PIP_FIND_LINKS": "/opt/wheels",
            "PIP_EXTRA_INDEX_URL": "x",
            "PIP_CONSTRAINT": "c.txt",
            "PIP_CERT": "ca.pem",
            "HOME": "/root",
        }
    )
    assert env == {
        "PIP_CERT": "ca.pem",
        "HOME": "/root",
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }


def test_an_env_that_differs_from_its_lock_is_named_in_one_line(tmp_path):
    release = _release(tmp_path)
    env = venv.ensure(release, "cpu", root=tmp_path, log=lambda *_: None)
    pins = ["numpy==2.4.0", "absl-py==2.1.0", "six==1.16.0", "attrs==23.1.0"]
    release.lockfile("cpu").write_text("\n".join(pins) + "\n")
    changed = dataclasses.replace(env, sha256=lockfile.sha256_file(release.lockfile("cpu")))
    with pytest.raises(venv.EnvMismatch) as err:
        venv.verify(changed, log=lambda *_: None)
    assert str(err.value) == (
        f"{env.path} does not match {env.lockfile}: absl-py==2.1.0 is in the lock but not "
        "installed; attrs==23.1.0 is in the lock but not installed; numpy==2.4.0 is in the lock "
        f"but not installed; and 1 more (./noxw -s env lists them); remove it (rm -r {env.path}) "
        "and rerun: the session builds it again from the lock"
    )


def test_a_session_on_an_env_changed_by_hand_stops_in_one_line_exit_2(tmp_path, capsys):
    """A package installed into the env by hand (its metadata is what pip and the check read):
    the session's one line and exit 2, bad input whose fix is to remove the env."""
    release = _release(tmp_path)
    env = venv.ensure(release, "cpu", root=tmp_path, log=lambda *_: None)
    (site,) = env.path.glob("lib/python3.*/site-packages")
    (site / "extra-1.0.dist-info").mkdir()
    (site / "extra-1.0.dist-info" / "METADATA").write_text("Name: extra\nVersion: 1.0\n")
    with pytest.raises(SystemExit) as stop, sessions.one_line("train"):
        venv.ensure(release, "cpu", root=tmp_path, log=lambda *_: None)
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"train: error: {env.path} does not match {env.lockfile}: extra==1.0 is installed but not "
        f"in the lock; remove it (rm -r {env.path}) and rerun: the session builds it again from "
        "the lock"
    ]
    assert (site / "extra-1.0.dist-info").is_dir()  # the env is left as it is, for `env` to show


def _release(tmp_path, lock_text=""):
    """A release whose cpu lock holds nothing: its env is a bare venv, built in a second."""
    directory = tmp_path / "releases" / "9.9.9"
    directory.mkdir(parents=True)
    (directory / "cpu.txt").write_text(lock_text)
    return Release("9.9.9", directory, {"python": "3.11"})


def test_ensure_writes_the_identity_and_reuses_an_env_that_has_it(tmp_path):
    release = _release(tmp_path)
    env = venv.ensure(release, "cpu", root=tmp_path, log=lambda *_: None)
    found = envinfo.read_identity(env.path)
    assert found == envinfo.Identity(
        "9.9.9", "cpu", str(release.lockfile("cpu")), env.sha256, "3.11", {}
    )
    assert not (env.path / venv.LEGACY_STAMP).exists()
    marker = env.path / "marker"
    marker.touch()
    assert venv.ensure(release, "cpu", root=tmp_path, log=lambda *_: None) == env
    assert marker.exists()  # reused, not rebuilt


def test_an_env_made_before_identity_files_is_given_one_not_rebuilt(tmp_path):
    release = _release(tmp_path)
    env = venv.ensure(release, "cpu", root=tmp_path, log=lambda *_: None)
    envinfo.identity_path(env.path).unlink()
    (env.path / venv.LEGACY_STAMP).write_text(env.sha256 + "\n")
    (env.path / "marker").touch()
    venv.ensure(release, "cpu", root=tmp_path, log=lambda *_: None)
    assert (env.path / "marker").exists()
    assert envinfo.read_identity(env.path).lock_sha256 == env.sha256


def test_an_identity_naming_another_lock_means_a_rebuild(tmp_path):
    release = _release(tmp_path)
    env = venv.ensure(release, "cpu", root=tmp_path, log=lambda *_: None)
    (env.path / "marker").touch()
    release.lockfile("cpu").write_text("# relocked: still empty, another sha256\n")
    rebuilt = venv.ensure(release, "cpu", root=tmp_path, log=lambda *_: None)
    assert rebuilt.sha256 != env.sha256 and not (env.path / "marker").exists()
    assert envinfo.read_identity(env.path).lock_sha256 == rebuilt.sha256


def _env_at(tmp_path, platform: str, path: Path) -> venv.Env:
    """An env of `platform` at `path`, made by hand (a gpu env's wheels are 3.2 GB)."""
    return venv.Env(Release("9.9.9", tmp_path, {}), platform, path, tmp_path / "lock.txt", "0")


def test_a_gpu_session_hands_its_command_the_image_xla_flags(tmp_path, monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    # The gpu env at this interpreter's prefix: its python is a real one, started as the train,
    # decode and bench sessions start pax.main (sessions.run over this environment).
    gpu = _env_at(tmp_path, "gpu", Path(sys.prefix))
    seen = tmp_path / "xla_flags"
    child = f"import os, pathlib; pathlib.Path({str(seen)!r}).write_text(os.environ['XLA_FLAGS'])"
    sessions.run([gpu.python, "-c", child], gpu.session_env())
    assert seen.read_text() == xla_flags.value()
    # The test session's too: tests/conftest.py adds its virtual CPU devices after them.
    assert testtools.session_env(gpu, tmp_path)["XLA_FLAGS"] == xla_flags.value()
    # Other platforms' sessions leave XLA_FLAGS to the environment.
    assert "XLA_FLAGS" not in _env_at(tmp_path, "cpu", tmp_path).session_env()
    assert "XLA_FLAGS" not in _env_at(tmp_path, "tpu", tmp_path).session_env()


def test_a_users_xla_flags_follow_the_images_so_theirs_win(tmp_path, monkeypatch):
    gpu = _env_at(tmp_path, "gpu", tmp_path)
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_triton_gemm=true --xla_dump_to=/tmp/x")
    flags = gpu.session_env()["XLA_FLAGS"]
    # XLA takes the last value of a flag given twice: the user's Triton choice stands.
    assert flags.split() == [
        *(flag for flag, _ in xla_flags.GPU_XLA_FLAGS),
        "--xla_gpu_enable_triton_gemm=true",
        "--xla_dump_to=/tmp/x",
    ]
    # A command started with them already (aot from the gpu session) does not repeat them.
    monkeypatch.setenv("XLA_FLAGS", flags)
    assert gpu.session_env()["XLA_FLAGS"] == flags
