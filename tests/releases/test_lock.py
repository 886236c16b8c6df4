"""pax.releases.compile: the platform locks and the test tools' lock beside them, compiled by a
fake pip-compile into a scratch releases/ (no index), and the command each one is given."""

import hashlib

import pytest

from pax import lockfile, paths
from pax.releases import catalog
from pax.releases import compile as locks

PRODUCT = {"jax": "1.0", "numpy": "2.0", "packaging": "25.0"}
TOOLS = {"pytest": "9.0", "nbclient": "0.11", "numpy": "2.0", "packaging": "25.0"}


def write_lock(path, versions):
    lines = ["# a scratch lock"]
    for name, version in sorted(versions.items()):
        digest = hashlib.sha256(f"{name}{version}".encode()).hexdigest()
        lines.append(f"{name}=={version} \\\n    --hash=sha256:{digest}")
    path.write_text("\n".join(lines) + "\n")


def scratch_release(tmp_path, locks_toml=""):
    directory = tmp_path / "releases" / "9.0.0"
    directory.mkdir(parents=True)
    (directory / "release.toml").write_text(f'version = "9.0.0"\npython = "3.11"\n{locks_toml}')
    return catalog.load(directory)


class FakeCompile:
    """Writes the product versions for a platform, `tools` for the test lock; records the order
    and whether the cpu lock was there when the test lock was compiled."""

    def __init__(self, tools=TOOLS):
        self.calls, self.tools = [], tools

    def __call__(self, rel, name, root):
        self.calls.append((name, rel.lockfile("cpu").is_file()))
        write_lock(rel.lockfile(name), self.tools if name == catalog.TEST_LOCK else PRODUCT)
        return lockfile.sha256_file(rel.lockfile(name)), 0.0, "new"


def test_the_test_lock_follows_the_cpu_lock_and_is_recorded(tmp_path):
    rel, fake = scratch_release(tmp_path), FakeCompile()
    shas = locks.lock(rel, None, tmp_path, log=lambda *_: None, compile=fake)
    assert fake.calls[-1] == (catalog.TEST_LOCK, True)  # after cpu.txt was written
    assert sorted(name for name, _ in fake.calls) == sorted(catalog.LOCKS)
    relocked = catalog.load(rel.dir)
    assert relocked.meta["locks"] == shas and list(shas) == list(catalog.LOCKS)
    assert relocked.test_lock == rel.dir / "test.txt"
    relocked.check_test_lock()


def test_a_test_lock_that_disagrees_with_the_cpu_lock_is_refused(tmp_path):
    rel = scratch_release(tmp_path)
    fake = FakeCompile(tools={**TOOLS, "numpy": "1.26", "packaging": "24.0"})
    with pytest.raises(catalog.TestLockMismatch) as err:
        locks.lock(rel, None, tmp_path, log=lambda *_: None, compile=fake)
    message = str(err.value)
    assert "\n" not in message and "on 2 package(s)" in message
    assert "numpy 1.26 (cpu.txt 2.0)" in message and "packaging 24.0 (cpu.txt 25.0)" in message
    assert isinstance(err.value, RuntimeError)  # the lock and release sessions' one-line errors


def test_the_test_lock_alone_needs_a_cpu_lock(tmp_path):
    rel = scratch_release(tmp_path)
    with pytest.raises(RuntimeError, match="lock both: ./noxw -s lock -- 9.0.0 cpu test"):
        locks.lock(rel, ["test"], tmp_path, log=lambda *_: None, compile=FakeCompile())
    write_lock(rel.lockfile("cpu"), PRODUCT)
    fake = FakeCompile()
    shas = locks.lock(rel, ["test"], tmp_path, log=lambda *_: None, compile=fake)
    assert fake.calls == [(catalog.TEST_LOCK, True)] and list(shas) == ["test"]


def test_platforms_alone_leave_the_test_lock_and_its_record_alone(tmp_path):
    rel = scratch_release(tmp_path, '\n[locks]\ntest = "' + "0" * 64 + '"\n')
    fake = FakeCompile()
    locks.lock(rel, ["tpu"], tmp_path, log=lambda *_: None, compile=fake)
    assert fake.calls == [("tpu", False)]
    assert catalog.load(rel.dir).meta["locks"] == {
        "tpu": lockfile.sha256_file(rel.lockfile("tpu")),
        "test": "0" * 64,
    }


def test_the_test_lock_is_compiled_from_test_in_constrained_by_the_cpu_lock(tmp_path):
    rel = scratch_release(tmp_path)
    test = locks.compile_command(rel, catalog.TEST_LOCK, tmp_path, "python")
    assert test[-1] == "requirements/test.in"
    assert test[test.index("-o") + 1] == "releases/9.0.0/test.txt"
    assert ["-c", "releases/9.0.0/cpu.txt"] == test[test.index("-c") : test.index("-c") + 2]
    assert "--generate-hashes" in test
    cpu = locks.compile_command(rel, "cpu", tmp_path, "python")
    assert cpu[-1] == "requirements/cpu.in" and "releases/9.0.0/cpu.txt" == cpu[cpu.index("-o") + 1]
    assert "-c" not in cpu  # no pins, no constraints


def test_gpu_locks_take_cuda_13_from_python_3_12_and_keep_cuda_12_before(tmp_path):
    def gpu_input(python):
        directory = tmp_path / python
        directory.mkdir()
        (directory / "release.toml").write_text(f'version = "9.9.9"\npython = ["{python}"]\n')
        name = locks.requirements_in(catalog.load(directory), "gpu")
        return (paths.ROOT / name).read_text()

    old, new = gpu_input("3.11"), gpu_input("3.12")
    assert "\njax[cuda12]\n" in old and "\njax[cuda13]" not in old
    assert "\njax[cuda13]\n" in new and "\njax[cuda12]" not in new
    assert locks.requirements_in(catalog.load(paths.ROOT / "releases" / "1.8.0"), "gpu") == (
        "requirements/gpu-cuda12.in"
    )


def test_requirements_keep_the_tools_out_of_the_platform_locks():
    """cpu.in, tpu.in and gpu.in take base.in and their platform's jax; test.in names the tools."""
    root = paths.ROOT / "requirements"
    for name in [*catalog.LOCK_PLATFORMS, "gpu-cuda12"]:
        text = (root / f"{name}.in").read_text()
        assert "-r test.in" not in text and "-r base.in" in text
    names = {
        line.split()[0].split(">")[0]
        for line in (root / "test.in").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert {"pytest", "pytest-xdist", "nbclient", "ipykernel", "matplotlib"} <= names
