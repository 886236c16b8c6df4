"""pax.envinfo: the identity a pinned env carries, and drift from its lock (no jax, no trainer).

The release locks here are the real ones under releases/, read by pax.lockfile as everywhere.
"""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from pax import envinfo, lockfile
from pax.paths import ROOT
from pax.releases import catalog as releases

LOCKS = [(r, p) for r in releases.list_releases() for p in releases.LOCK_PLATFORMS]


def test_catalog_holds_every_release_lock():
    found = {(lock.release, lock.platform): lock for lock in envinfo.catalog(ROOT / "releases")}
    assert set(found) == {(r.version, p) for r, p in LOCKS}
    for release, platform in LOCKS:
        lock = found[release.version, platform]
        assert lock.sha256 == release.lock_sha256(platform) == release.recorded_sha256(platform)


RUNNING = "%d.%d" % sys.version_info[:2]  # an identity written for this interpreter


def _identity(release="1.6.0", platform="cpu"):
    rel = releases.resolve(release)
    path = rel.lockfile(platform)
    return envinfo.Identity(
        release=release,
        platform=platform,
        lockfile=str(path),
        lock_sha256=rel.lock_sha256(platform),
        python="3.11",
        locked=lockfile.lock_versions(path.read_text()),
    )


def _prefix(tmp_path, identity=None):
    prefix = tmp_path / "env"
    prefix.mkdir()
    if identity:
        (prefix / envinfo.IDENTITY_FILE).write_text(identity.to_json())
    return prefix


def test_identity_file_round_trips(tmp_path):
    ident = _identity()
    prefix = _prefix(tmp_path, ident)
    assert envinfo.read_identity(prefix) == ident
    assert envinfo.read_identity(tmp_path) is None


def test_identity_names_the_source_revision_and_older_files_still_read(tmp_path):
    """An image's identity names the commit its pax came from; files written before that field
    (and venvs', which run the checkout) have none and read as before."""
    built = dataclasses.replace(_identity(), source_revision="0f65f91" + "0" * 33)
    prefix = _prefix(tmp_path, built)
    assert envinfo.read_identity(prefix) == built
    assert json.loads(built.to_json())["source_revision"] == built.source_revision
    older = json.loads(_identity().to_json())
    assert "source_revision" not in older
    (prefix / envinfo.IDENTITY_FILE).write_text(json.dumps(older))
    assert envinfo.read_identity(prefix) == _identity()
    assert envinfo.read_identity(prefix).source_revision is None


def test_an_image_is_exact_without_what_its_recipe_left_out(tmp_path):
    """Dockerfile.gpu's left-out packages: absent is exact, and the description names them;
    anything else missing is still drift."""
    ident = dataclasses.replace(_identity("1.7.0", "gpu"), left_out=("nvidia-cusolver-cu12",))
    prefix = _prefix(tmp_path, ident)
    assert envinfo.read_identity(prefix) == ident
    have = {k: v for k, v in ident.locked.items() if k != "nvidia-cusolver-cu12"}
    env = envinfo.describe(environ={}, prefix=prefix, have=have, locks=())
    assert env["state"] == "exact" and env["left_out"] == ["nvidia-cusolver-cu12"]
    assert "without nvidia-cusolver-cu12 (left out by the image's recipe)" in envinfo.render(env)
    del have["nvidia-cufft-cu12"]
    env = envinfo.describe(environ={}, prefix=prefix, have=have, locks=())
    assert env["state"] == "drifted"
    assert [row["package"] for row in env["differences"]] == ["nvidia-cufft-cu12"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "not JSON"),
        ('{"format": "other"}', "not a pax-env/1 file"),
        ('{"format": "pax-env/1", "release": "1.6.0"}', "missing platform, lockfile"),
    ],
)
def test_a_damaged_identity_is_named_and_ignored(tmp_path, text, message):
    prefix = _prefix(tmp_path)
    (prefix / envinfo.IDENTITY_FILE).write_text(text)
    with pytest.raises(envinfo.IdentityError, match=message):
        envinfo.read_identity(prefix)
    env = envinfo.describe(environ={}, prefix=prefix, have={"jax": "0.10.2"}, locks=())
    assert env["state"] == "unpinned" and env["identity"] is None
    assert message in env["notes"][0]


def test_pinned_env_equal_to_its_lock_is_exact(tmp_path):
    ident = _identity()
    prefix = _prefix(tmp_path, ident)
    env = envinfo.describe(environ={}, prefix=prefix, have={**ident.locked, "pax": "1.6.0"})
    assert env["state"] == "exact"
    assert (env["release"], env["platform"], env["lock_sha256"]) == (
        "1.6.0",
        "cpu",
        ident.lock_sha256,
    )
    assert env["identity"] == str(prefix / "pax-env.json")
    assert env["differences"] == [] and env["pax"] == "1.6.0"
    assert envinfo.summary(env).startswith(
        f"environment: release 1.6.0 cpu, exactly its lock (sha256 {ident.lock_sha256[:12]}"
    )


def test_a_bumped_package_is_drift_from_the_named_release(tmp_path):
    ident = _identity()
    prefix = _prefix(tmp_path, ident)
    have = {**ident.locked, "absl-py": "2.5.2", "my-tool": "0.1"}
    del have["humanize"]
    env = envinfo.describe(environ={}, prefix=prefix, have=have)
    assert env["state"] == "drifted" and env["release"] == "1.6.0"
    assert env["differences"] == [
        {"package": "absl-py", "locked": "2.5.1", "installed": "2.5.2", "kind": "changed"},
        {"package": "humanize", "locked": "4.17.0", "installed": None, "kind": "missing"},
        {"package": "my-tool", "locked": None, "installed": "0.1", "kind": "extra"},
    ]
    assert env["nearest"]["release"] == "1.6.0" and env["nearest"]["platform"] == "cpu"
    line = envinfo.summary(env)
    assert line.startswith("environment: DRIFTED from release 1.6.0 cpu")
    assert (
        "3 differences: absl-py: lock pins 2.5.1, installed 2.5.2; humanize==4.17.0 is in the "
        "lock but not installed; my-tool==0.1 is installed but not in the lock" in line
    )


@pytest.mark.parametrize(
    "release, platform", [("1.3.0", "tpu"), ("1.4.0", "gpu"), ("1.6.0", "cpu")]
)
def test_unpinned_env_names_the_nearest_release_and_platform(tmp_path, release, platform):
    locked = _identity(release, platform).locked
    name = sorted(locked)[len(locked) // 2]
    have = {**locked, name: locked[name] + ".post1"}
    env = envinfo.describe(environ={}, prefix=_prefix(tmp_path), have=have)
    assert env["state"] == "unpinned" and env["release"] is None
    assert (env["nearest"]["release"], env["nearest"]["platform"]) == (release, platform)
    assert env["nearest"]["differences"] == 1
    assert env["differences"] == [
        {
            "package": name,
            "locked": locked[name],
            "installed": locked[name] + ".post1",
            "kind": "changed",
        }
    ]
    assert env["nearest"]["tied"] == []
    assert envinfo.summary(env).startswith("environment: UNPINNED (no pax-env.json in ")


def test_releases_sharing_a_set_are_named_as_tied(tmp_path):
    # 1.6.0 changed only the cpu lock: its gpu lock holds 1.5.0's versions, as later ones may.
    locked = _identity("1.5.0", "gpu").locked
    same = [
        r.version for r in releases.list_releases() if _identity(r.version, "gpu").locked == locked
    ]
    assert {"1.5.0", "1.6.0"} <= set(same)
    newest, tied = same[-1], [f"{v} gpu" for v in reversed(same[:-1])]
    env = envinfo.describe(environ={}, prefix=_prefix(tmp_path), have={**locked, "extra": "1"})
    assert (env["nearest"]["release"], env["nearest"]["platform"]) == (newest, "gpu")
    assert sorted(env["nearest"]["tied"]) == sorted(tied)
    # Every pin of those locks is installed, and one package more: named by the newest.
    assert env["state"] == "superset" and (env["release"], env["platform"]) == (newest, "gpu")
    assert "; as near: " in envinfo.summary(env)


def test_without_identity_an_exact_release_set_is_named_by_its_lock(tmp_path):
    locked = _identity("1.4.0", "tpu").locked
    env = envinfo.describe(environ={}, prefix=_prefix(tmp_path), have=dict(locked))
    assert env["state"] == "exact" and env["identity"] is None
    assert (env["release"], env["platform"]) == ("1.4.0", "tpu")
    assert env["lock_sha256"] == releases.resolve("1.4.0").lock_sha256("tpu")


def test_environment_variables_override_the_identity(tmp_path):
    ident = _identity("1.6.0", "cpu")
    prefix = _prefix(tmp_path, ident)
    other = releases.resolve("1.5.0").lockfile("cpu")
    environ = {"PAX_RELEASE": "1.5.0", "PAX_LOCKFILE": str(other), "PAX_LOCK_SHA256": "ab" * 32}
    env = envinfo.describe(environ=environ, prefix=prefix, have=dict(ident.locked))
    # The installed set is 1.6.0's, the variables name 1.5.0's lock: compared with that lock,
    # whose every pin 1.6.0's set holds, beside the packages 1.6.0 added.
    assert env["release"] == "1.5.0" and env["lockfile"] == str(other)
    assert env["lock_sha256"] == releases.resolve("1.5.0").lock_sha256("cpu")
    assert env["state"] == "superset" and env["nearest"]["release"] == "1.6.0"
    assert {r["kind"] for r in env["differences"]} == {"extra"}
    assert env["overridden_by"] == ["PAX_RELEASE", "PAX_LOCKFILE", "PAX_LOCK_SHA256"]
    assert any("PAX_LOCK_SHA256 abababababab is not the sha256" in n for n in env["notes"])


def test_a_lockfile_changed_after_the_build_is_noted(tmp_path):
    lock = tmp_path / "cpu.txt"
    lock.write_text("jax==0.10.2\n")
    ident = envinfo.Identity(
        "9.9.9", "cpu", str(lock), envinfo.sha256_file(lock), RUNNING, {"jax": "0.10.2"}
    )
    prefix = _prefix(tmp_path, ident)
    lock.write_text("jax==0.10.3\n")
    env = envinfo.describe(environ={}, prefix=prefix, have={"jax": "0.10.2"}, locks=())
    assert env["state"] == "exact"  # the env is what it was built as ...
    assert env["notes"] == [f"{lock} changed since this environment was built from it"]


def test_installed_set_is_what_import_sees(tmp_path):
    # Two copies of one distribution on the path: the first one is the one imported.
    for where, version in (("a", "2.0"), ("b", "1.0")):
        info = tmp_path / where / f"demo_pkg-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: Demo_Pkg\nVersion: {version}\n"
        )
    assert envinfo.installed([str(tmp_path / "a"), str(tmp_path / "b")]) == {"demo-pkg": "2.0"}
    assert envinfo.installed([str(tmp_path / "b"), str(tmp_path / "a")]) == {"demo-pkg": "1.0"}


def _pax(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "pax", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in (env or os.environ).items() if not k.startswith("PAX_")},
        timeout=120,
    )


def test_pax_env_needs_no_jax():
    probe = (
        "import runpy, sys\n"
        "sys.argv = ['pax', 'env', '--json']\n"
        "try:\n    runpy.run_module('pax', run_name='__main__')\n"
        "except SystemExit as e:\n    code = e.code\n"
        "print('jax' in sys.modules, code)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert r.stdout.strip().splitlines()[-1] in ("False 0", "False 1"), r.stdout + r.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "no command"),
        (["envs"], "unknown command 'envs'"),
        (["env", "--jsn"], "unrecognized arguments: --jsn"),
    ],
)
def test_pax_command_bad_usage_is_exit_2(args, message):
    r = _pax(*args)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_an_identity_for_another_python_is_noted(tmp_path):
    ident = envinfo.Identity("9.9.9", "cpu", "/nowhere/cpu.txt", "ab" * 32, "3.99", {"jax": "1"})
    env = envinfo.describe(environ={}, prefix=_prefix(tmp_path, ident), have={"jax": "1"}, locks=())
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert env["notes"] == [f"pax-env.json was written for Python 3.99; this is {running}"]


# What the TPU machine's own Python holds: every pin of the tpu lock at its version (its jax,
# jaxlib and libtpu, the rest carried in), and packages of its own besides (pytest's).
MACHINE_EXTRAS = {"pytest": "9.0.1", "iniconfig": "2.3.0", "pluggy": "1.6.0"}


def test_every_pin_installed_with_other_packages_is_a_superset_named_by_its_lock(tmp_path):
    newest = releases.newest().version
    locked = _identity(newest, "tpu").locked
    env = envinfo.describe(environ={}, prefix=_prefix(tmp_path), have={**locked, **MACHINE_EXTRAS})
    assert env["state"] == "superset" and env["identity"] is None
    # Releases may share a lock's set; the newest of them names the env, the others are tied.
    assert (env["release"], env["platform"]) == (newest, "tpu")
    assert env["lock_sha256"] == releases.resolve(newest).lock_sha256("tpu")
    assert [(r["package"], r["kind"]) for r in env["differences"]] == [
        (name, "extra") for name in sorted(MACHINE_EXTRAS)
    ]
    tied = env["nearest"]["tied"]
    assert all(_identity(t.split()[0], "tpu").locked == locked for t in tied)
    assert envinfo.summary(env) == (
        f"environment: release {newest} tpu, every pin of its lock installed at its version "
        f"(sha256 {env['lock_sha256'][:12]}{'; as near: ' + ', '.join(tied) if tied else ''}), "
        "and 3 other packages: iniconfig, pluggy, pytest (no identity file)"
    )
    assert "state       superset: every pin of the lock installed at its version, and 3 other" in (
        envinfo.render(env)
    )


def test_a_pin_at_another_version_is_no_superset(tmp_path):
    locked = _identity("1.7.0", "tpu").locked
    have = {**locked, **MACHINE_EXTRAS, "numpy": "2.4.5"}  # the machine's own numpy
    env = envinfo.describe(environ={}, prefix=_prefix(tmp_path), have=have)
    assert env["state"] == "unpinned" and env["release"] is None
    # Named by an identity, the same set is drift from its lock; with extras alone, a superset.
    (tmp_path / "pinned").mkdir()
    prefix = _prefix(tmp_path / "pinned", _identity("1.7.0", "tpu"))
    assert envinfo.describe(environ={}, prefix=prefix, have=have)["state"] == "drifted"
    have = {**locked, **MACHINE_EXTRAS}
    assert envinfo.describe(environ={}, prefix=prefix, have=have)["state"] == "superset"
