"""Every run names its environment, however it was started.

The runs here are started as docs/parallelism.md's multi-host example and Slurm's PAX_RUNTIME=venv start
them: `.venv/pax-<release>-cpu/bin/python -m pax.main` from the repo root, with no PAX_*
variables and no PYTHONPATH. The pinned env is the one these tests run in (./noxw -s test
built it, wrote its identity file and checked it against its lock).

The drifted env is made from it cheaply: a new venv whose site-packages links every entry of
the pinned env's, except that one package's metadata says the next patch version, which is
all `pip install -U` of it leaves for importlib.metadata, pip and the manifest to see (the code
stays the pinned one's, so the run itself is unaffected).
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from pax import envinfo, lockfile
from pax.paths import ROOT
from pax.pip import make_venv
from tests.helpers import xla_flags

BUMPED = "absl-py"  # pure Python, and the trainer imports it (absl flags and logging)
# The model and batch sizes of tests/train/test_survival.py's runs: the persistent compilation
# cache, which these processes inherit, then holds their programs.
SHORT_RUN = [
    "--exp=tasks.lm.params.lm_cloud.LmCloudSpmdTiny",
    "--enable_checkpoint_saving=false",
    *(
        f"--set={k}={v}"
        for k, v in dict(
            NUM_TRAIN_STEPS=2,
            SUMMARY_EVERY_N_STEPS=1,
            EVAL_EVERY_N_STEPS=100,
            NUM_LAYERS=1,
            MODEL_DIMS=64,
            HIDDEN_DIMS=128,
            SEQ_LEN=32,
            PERCORE_BATCH_SIZE=8,
            EVAL_NUM_BATCHES=1,
        ).items()
    ),
]


def _clean_env() -> dict:
    """The caller's environment without PAX_* or PYTHONPATH: a run started by hand (the
    session's measured CPU peak kept: it says nothing of the environment, and saves measuring)."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV")
    kept = ("PAX_CPU_PEAK_FLOPS",)
    env = {
        k: v
        for k, v in os.environ.items()
        if (not k.startswith("PAX_") or k in kept) and k not in drop
    }
    return env | {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(1)}


def _run(python, job_dir):
    r = subprocess.run(
        [str(python), "-m", "pax.main", f"--job_log_dir={job_dir}", *SHORT_RUN],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_clean_env(),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    log = [ln for ln in r.stderr.splitlines() if ln[:1] in "IWE" and "] " in ln]
    return json.loads((job_dir / "manifest.json").read_text()), log[0].split("] ", 1)[1]


def _pax_env(python):
    r = subprocess.run(
        [str(python), "-m", "pax", "env", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_clean_env(),
        timeout=120,
    )
    text = subprocess.run(
        [str(python), "-m", "pax", "env"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_clean_env(),
        timeout=120,
    )
    assert r.returncode == text.returncode, text.stdout + text.stderr
    return r.returncode, json.loads(r.stdout), text.stdout


@pytest.fixture(scope="module")
def pinned():
    """This interpreter's env and its identity (fails, not skips, outside a pinned env)."""
    identity = envinfo.read_identity()
    assert identity is not None, (
        f"{sys.prefix} has no {envinfo.IDENTITY_FILE}: run the tests through ./noxw -s test, "
        "which builds the pinned env and writes it"
    )
    return identity


@pytest.fixture(scope="module")
def bumped(pinned, tmp_path_factory):
    """(python, version) of a venv that is the pinned env with BUMPED one patch version up."""
    root = tmp_path_factory.mktemp("bumped") / "venv"
    make_venv(root)
    pinned_site = Path(sysconfig.get_paths()["purelib"])
    site = Path(sysconfig.get_paths(vars={"base": str(root), "platbase": str(root)})["purelib"])
    old = pinned.locked[BUMPED]
    new = ".".join([*old.split(".")[:-1], str(int(old.split(".")[-1]) + 1)])
    for entry in pinned_site.iterdir():
        name = entry.name.removesuffix(".dist-info").rsplit("-", 1)[0]
        if entry.name.endswith(".dist-info") and lockfile.canonicalize(name) == BUMPED:
            moved = site / entry.name.replace(f"-{old}.dist-info", f"-{new}.dist-info")
            shutil.copytree(entry, moved)
            meta = moved / "METADATA"
            meta.write_text(meta.read_text().replace(f"\nVersion: {old}\n", f"\nVersion: {new}\n"))
        elif entry.name != "__pycache__":
            (site / entry.name).symlink_to(entry)
    return root / "bin" / "python", old, new


def test_a_direct_run_names_its_release_and_lock(pinned, tmp_path):
    manifest, first = _run(Path(sys.prefix) / "bin" / "python", tmp_path / "job")
    lock_sha = envinfo.sha256_file(ROOT / "releases" / pinned.release / "cpu.txt")
    assert (manifest["release"], manifest["lock_sha256"]) == (pinned.release, lock_sha)
    assert manifest["lockfile"].endswith(f"releases/{pinned.release}/cpu.txt")
    env = manifest["env"]
    assert env["state"] == "exact" and env["overridden_by"] == [] and env["differences"] == []
    assert env["identity"] == str(Path(sys.prefix) / "pax-env.json")
    assert first.startswith(f"environment: release {pinned.release} cpu, exactly its lock")


def test_pax_env_in_the_pinned_env(pinned):
    code, desc, text = _pax_env(Path(sys.prefix) / "bin" / "python")
    assert code == 0 and desc["state"] == "exact" and desc["release"] == pinned.release
    assert f"release     {pinned.release} cpu" in text and "state       exact" in text


def test_a_run_with_one_package_bumped_names_nearest_release_and_the_difference(
    pinned, bumped, tmp_path
):
    python, old, new = bumped
    manifest, first = _run(python, tmp_path / "job")
    env = manifest["env"]
    assert manifest["release"] is None and env["state"] == "unpinned"
    assert (env["nearest"]["release"], env["nearest"]["platform"]) == (pinned.release, "cpu")
    assert env["differences"] == [
        {"package": BUMPED, "locked": old, "installed": new, "kind": "changed"}
    ]
    assert first.startswith("environment: UNPINNED (no pax-env.json in ")
    assert f"nearest release {pinned.release} cpu" in first
    assert f"{BUMPED}: lock pins {old}, installed {new}" in first


def test_pax_env_in_the_bumped_env(pinned, bumped):
    python, old, new = bumped
    code, desc, text = _pax_env(python)
    assert code == 1 and desc["state"] == "unpinned"
    assert desc["nearest"]["release"] == pinned.release and desc["nearest"]["differences"] == 1
    assert f"  {BUMPED}  {old}   {new}" in text.splitlines()  # the table's one row
    # The same env given the pinned env's identity (as `pip install -U` in the pinned env
    # itself would leave it): drifted from that release, the same one difference.
    shutil.copy(Path(sys.prefix) / "pax-env.json", python.parent.parent / "pax-env.json")
    try:
        code, desc, text = _pax_env(python)
    finally:
        (python.parent.parent / "pax-env.json").unlink()
    assert code == 1 and desc["state"] == "drifted" and desc["release"] == pinned.release
    assert [d["package"] for d in desc["differences"]] == [BUMPED]
    assert f"state       drifted: 1 difference from release {pinned.release} cpu" in text


@pytest.fixture(scope="module")
def with_extra(pinned, tmp_path_factory):
    """The python of a venv of no release (no pax-env.json) that is the pinned env and one
    installed distribution more, as a machine's own Python with the release's pins carried in:
    every entry of the pinned env's site-packages linked, and the extra's metadata beside."""
    root = tmp_path_factory.mktemp("extra") / "venv"
    make_venv(root)
    pinned_site = Path(sysconfig.get_paths()["purelib"])
    site = Path(sysconfig.get_paths(vars={"base": str(root), "platbase": str(root)})["purelib"])
    for entry in pinned_site.iterdir():
        if entry.name != "__pycache__":
            (site / entry.name).symlink_to(entry)
    info = site / "machine_tool-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: machine-tool\nVersion: 1.0\n")
    return root / "bin" / "python"


def test_a_run_with_every_pin_and_one_package_more_names_the_lock_and_the_extra(
    pinned, with_extra, tmp_path
):
    """Its manifest says every pin of the release's lock is installed at its version and which
    other packages are there; the band recorder takes such a run and keeps the extras."""
    from pax.curves import record

    manifest, first = _run(with_extra, tmp_path / "job")
    lock_sha = envinfo.sha256_file(ROOT / "releases" / pinned.release / "cpu.txt")
    assert (manifest["release"], manifest["lock_sha256"]) == (pinned.release, lock_sha)
    env = manifest["env"]
    assert env["state"] == "superset" and env["identity"] is None
    assert env["differences"] == [
        {"package": "machine-tool", "locked": None, "installed": "1.0", "kind": "extra"}
    ]
    assert manifest["segments"][0]["env_state"] == "superset"
    # Releases sharing this lock's set are named after the sha256, as equally near.
    tied = "; as near: " + ", ".join(env["nearest"]["tied"]) if env["nearest"]["tied"] else ""
    assert first.startswith(
        f"environment: release {pinned.release} cpu, every pin of its lock installed at its "
        f"version (sha256 {lock_sha[:12]}{tied}), and 1 other package: machine-tool"
    )
    entry, _, _ = record._entry(record.Recorded(tmp_path / "job", "train"), ROOT)
    assert entry["lock_sha256"] == lock_sha and entry["env_state"] == "superset"
    assert entry["other_packages"] == {"machine-tool": "1.0"}
