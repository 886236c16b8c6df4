import hashlib

from pax.train import manifest


def test_release_and_lock_come_from_the_environment(tmp_path, monkeypatch):
    lock = tmp_path / "cpu.txt"
    lock.write_text("jax==0.10.2 \\\n    --hash=sha256:00\n")
    monkeypatch.setenv("PAX_RELEASE", "1.4.0")
    monkeypatch.setenv("PAX_LOCKFILE", str(lock))
    info = manifest.release_info()
    assert info["release"] == "1.4.0"
    assert info["lockfile"] == str(lock)
    assert info["lock_sha256"] == hashlib.sha256(lock.read_bytes()).hexdigest()


def test_outside_a_release_the_fields_are_null(monkeypatch):
    for var in ("PAX_RELEASE", "PAX_LOCKFILE", "PAX_IMAGE"):
        monkeypatch.delenv(var, raising=False)
    assert manifest.release_info() == {
        "release": None,
        "lockfile": None,
        "lock_sha256": None,
        "image": None,
    }
