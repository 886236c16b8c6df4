"""A release's Python is found without hand set-up (PATH, pyenv's folders, uv), or named."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pax import interpreters
from pax.errors import USAGE

RUNNING = "%d.%d" % sys.version_info[:2]


def _version(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def bare(tmp_path, monkeypatch):
    """No pythonX.Y on PATH, an empty pyenv root, no uv: what each test adds is all there is."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    monkeypatch.setattr(interpreters, "uv_binary", lambda: None)
    return tmp_path


def test_the_running_python_is_taken_first():
    assert interpreters.require(["3.99", RUNNING], "release X") == (RUNNING, sys._base_executable)


def test_a_pyenv_shim_that_refuses_is_passed_over_for_pyenvs_own_folders(bare):
    # pyenv's shim exists on PATH but starts only the selected version; its folders hold the rest.
    _script(
        bare / "bin" / "python3.99", "echo 'pyenv: python3.99: command not found' >&2; exit 127"
    )
    older = _script(bare / "pyenv/versions/3.99.1/bin/python3.99", "echo 3.99")
    newer = _script(bare / "pyenv/versions/3.99.10/bin/python3.99", "echo 3.99")
    _script(bare / "pyenv/versions/3.99.11t/bin/python3.99", "echo 3.99")  # free-threaded: not it
    assert interpreters.find("3.99") == str(newer)
    newer.unlink()
    assert interpreters.find("3.99") == str(older)


def test_a_missing_python_is_one_line_naming_it_and_how_to_get_it(bare):
    with pytest.raises(interpreters.MissingPython) as raised:
        interpreters.require(["3.98", "3.99"], "release 9.9.9")
    message = str(raised.value)
    assert raised.value.exit_code == USAGE
    assert "\n" not in message
    assert message.startswith("release 9.9.9 needs Python 3.98 or 3.99, and none was found")
    assert "uv python install 3.98" in message


def test_this_machines_other_pythons_are_found_and_are_what_they_claim():
    found = {v: interpreters.find(v) for v in ("3.11", "3.12", "3.13") if v != RUNNING}
    found = {v: p for v, p in found.items() if p}
    if not found:
        pytest.skip("no other CPython 3.11-3.13 on this machine")
    for version, python in found.items():
        assert os.access(python, os.X_OK)
        assert _version(python) == version
