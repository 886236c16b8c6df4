"""pax.environments.install: a pin as a requirement line, its hashes, and a hashed lock installed
exactly, by uv or by pip."""

import re
import subprocess

import pytest

from pax import lockfile
from pax.environments import install
from pax.lockfile import Pin
from pax.pip import make_venv
from tests.bisect.wheels import build_wheel, sha256, write_lock


def test_a_pin_as_pip_reads_it_and_the_sha256s_it_accepts():
    pin = Pin("zope-interface", "7.0", ("sha256:00aa", "sha256:11BB", "md5:ffff"))
    assert install.requirement_line(pin) == (
        "zope-interface==7.0 --hash=sha256:00aa --hash=sha256:11BB --hash=md5:ffff"
    )
    assert pin.sha256s == {"00aa", "11bb"}  # as sha256_file spells a file's
    assert install.requirement_line(Pin("six", "1.0")) == "six==1.0"


def test_uv_only_where_there_is_one(monkeypatch):
    monkeypatch.setattr(install, "uv_binary", lambda: None)
    assert install.Installer.choose().name == "pip"
    with pytest.raises(RuntimeError, match="--installer uv: uv is not installed"):
        install.Installer.choose("uv")
    monkeypatch.setattr(install, "uv_binary", lambda: "/bin/uv")
    assert install.Installer.choose("pip").name == "pip"
    uv = install.Installer.choose()
    assert uv.command("py", "uninstall", "-y", "a") == [
        "/bin/uv",
        "pip",
        "uninstall",
        "--no-config",
        "--python",
        "py",
        "a",
    ]


def _simple_index(tmp_path):
    """A PEP 503 index on disk holding one wheel (both installers read file:// indexes)."""
    root = tmp_path / "simple"
    (root / "w00").mkdir(parents=True)
    wheel = build_wheel(root / "w00", "w00", "1.0")
    (root / "w00" / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')
    return root, wheel


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_install_lock_installs_exactly_a_hashed_lock_and_refuses_a_wrong_hash(
    tmp_path, monkeypatch, installer
):
    root, wheel = _simple_index(tmp_path)
    monkeypatch.setenv("PIP_INDEX_URL", root.as_uri())
    # Bytecode is written at install, so no process compiles the env's modules again, even where
    # Python writes none on import.
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    if installer == "pip":
        monkeypatch.setattr(install, "uv_binary", lambda: None)
    target = tmp_path / "env"
    python = make_venv(target)
    lock = write_lock(tmp_path / "good.txt", {"w00": "1.0"}, root / "w00")
    assert install.install_lock(python, lock) == installer
    assert lockfile.installed_in(python) == {"w00": "1.0"}
    assert [p.name for p in target.glob("lib/python3*/site-packages/w00/__pycache__/*.pyc")]

    make_venv(target)
    tampered = tmp_path / "tampered.txt"
    tampered.write_text(lock.read_text().replace(sha256(wheel), "0" * 64))
    with pytest.raises(subprocess.CalledProcessError):
        install.install_lock(python, tampered)
    assert lockfile.installed_in(python) == {}  # nothing half-installed


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_pip_check_names_an_unmet_requirement_in_one_line_and_nothing_when_met(tmp_path, installer):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    python = make_venv(tmp_path / "env")
    chosen = install.Installer.choose(installer)
    core, user = (
        build_wheel(wheels, "m-core", "2"),
        build_wheel(wheels, "m-user", "1", "", ("m-core<2",)),
    )
    chosen.run(python, "install", "--no-deps", str(core), check=True, capture_output=True)
    assert install.pip_check(python, chosen) == ""
    chosen.run(python, "install", "--no-deps", str(user), check=True, capture_output=True)
    problem = install.pip_check(python, chosen)
    # pip: "m-user 1 has requirement m-core<2, but you have m-core 2."; uv: "The package
    # `m-user` requires `m-core<2`, but `2` is installed".
    assert re.search(r"m-user.* (has requirement|requires) `?m-core<2`?, but ", problem), problem
    assert "\n" not in problem and "Using Python" not in problem
