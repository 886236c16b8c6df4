import hashlib
import json
import os

from pax import envinfo
from pax.train import manifest


def test_release_and_lock_come_from_the_environment_variables(tmp_path):
    lock = tmp_path / "cpu.txt"
    lock.write_text("jax==0.10.2 \\\n    --hash=sha256:00\n")
    env = envinfo.describe(
        environ={"PAX_RELEASE": "1.4.0", "PAX_LOCKFILE": str(lock)},
        prefix=tmp_path,
        have={"jax": "0.10.2"},
        locks=(),
    )
    info = manifest.release_info(env)
    assert info["release"] == "1.4.0"
    assert info["lockfile"] == str(lock)
    assert info["lock_sha256"] == hashlib.sha256(lock.read_bytes()).hexdigest()
    assert env["state"] == "exact" and env["overridden_by"] == ["PAX_RELEASE", "PAX_LOCKFILE"]


def test_outside_a_release_the_fields_are_null(tmp_path):
    # No identity file at the prefix, no PAX_* variables, no release lock to match.
    env = envinfo.describe(environ={}, prefix=tmp_path, have={"jax": "0.10.2"}, locks=())
    assert manifest.release_info(env) | {"image": None} == {
        "release": None,
        "lockfile": None,
        "lock_sha256": None,
        "image": None,
    }
    assert env["state"] == "unpinned" and env["nearest"] is None


def test_a_run_records_the_xla_flags_it_ran_with(tiny_job):
    # tiny_job trained in this process, under tests/conftest.py's XLA_FLAGS.
    m = json.loads((tiny_job / manifest.FILE).read_text())
    ran_with = {"XLA_FLAGS": os.environ["XLA_FLAGS"], "LIBTPU_INIT_ARGS": None}
    assert "--xla_force_host_platform_device_count=8" in ran_with["XLA_FLAGS"]
    assert m["xla_flags"] == ran_with
    assert [s["xla_flags"] for s in m["segments"]] == [ran_with]
