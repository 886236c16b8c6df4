"""pax.environments.venv: comparing an environment with its lock."""

import os
import subprocess
import sys

from pax.environments import venv


def test_diff_equal_is_empty():
    assert venv.diff({"jax": "0.10.2"}, {"jax": "0.10.2"}) == []


def test_diff_names_every_difference():
    lines = venv.diff(
        {"jax": "0.10.2", "pip": "26.3", "numpy": "2.4.0"},
        {"jax": "0.10.1", "numpy": "2.4.0", "flax": "0.12.8"},
    )
    assert lines == [
        "  missing     flax==0.12.8  (in lock, not installed)",
        "  version     jax: installed 0.10.2, lock 0.10.1",
        "  unexpected  pip==26.3  (installed, not in lock)",
    ]


def test_pip_env_ignores_machine_pip_settings():
    env = venv.pip_env(
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


def test_installed_versions_of_a_bare_venv(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "env")], check=True
    )
    installed = venv.installed_versions(tmp_path / "env" / "bin" / "python")
    assert installed == {}
    assert venv.diff(installed, {"numpy": "2.4.0"}) == [
        "  missing     numpy==2.4.0  (in lock, not installed)"
    ]
