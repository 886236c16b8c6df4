"""pax.releases.diff: lock names, version order, the readable diff."""

import hashlib
import subprocess
from pathlib import Path

import pytest

from pax.lockfile import Pin
from pax.releases import cli as releases_cli
from pax.releases import diff

# Package: its version in lock A and in lock B (None: not in that lock).
VERSIONS = {
    "jax": ("0.9.0", "0.10.2"),
    "new-thing": (None, "0.1"),
    "numpy": ("1.26.4", "2.1.0"),
    "old-thing": ("1.0", None),
    "six": ("1.16.0", "1.16.0"),
    "zlib-ng": ("2.0.0", "1.9.9"),
}


def _lock(side: int) -> str:
    """A pip-compile lock of VERSIONS' side 0 (A) or 1 (B), one hash per pin: the same version
    gets the same hash."""
    pins = [f"{name}=={v[side]}" for name, v in VERSIONS.items() if v[side]]
    return "".join(
        f"{p} \\\n    --hash=sha256:{hashlib.sha256(p.encode()).hexdigest()}\n" for p in pins
    )


LOCK_A, LOCK_B = _lock(0), _lock(1)


@pytest.mark.parametrize(
    "a,b,order",
    [
        ("1.0", "1.0.0", 0),
        ("1.9", "1.10", -1),
        ("0.10.2", "0.9.0", 1),
        ("1.0rc1", "1.0", -1),
        ("1.0.dev1", "1.0a1", -1),
        ("1.0.post1", "1.0", 1),
        ("2026.4.0", "2026.10.0", -1),
    ],
)
def test_versions_in_pep_440_order(a, b, order):
    key_a, key_b = diff.version_key(a), diff.version_key(b)
    assert (key_a > key_b) - (key_a < key_b) == order


def test_diff_kinds_and_majors():
    a = diff.lockfile.parse_lockfile_text(LOCK_A)
    b = diff.lockfile.parse_lockfile_text(LOCK_B)
    changes = {c.name: c for c in diff.diff(a, b)}
    assert {n: c.kind for n, c in changes.items()} == {
        "jax": "upgraded",
        "new-thing": "added",
        "numpy": "upgraded",
        "old-thing": "removed",
        "zlib-ng": "downgraded",
    }
    assert changes["numpy"].major and changes["jax"].major  # 1 -> 2; 0.9 -> 0.10 (0.x minor)
    assert changes["zlib-ng"].major  # 2 -> 1
    assert not changes["new-thing"].major


def test_same_version_other_hashes_is_rebuilt():
    changes = diff.diff(
        {"x": Pin("x", "1.0", ("sha256:aa",))}, {"x": Pin("x", "1.0", ("sha256:bb",))}
    )
    assert [c.kind for c in changes] == ["rebuilt"]
    assert (
        diff.diff({"x": Pin("x", "1.0", ("sha256:aa",))}, {"x": Pin("x", "1.0", ("sha256:aa",))})
        == []
    )


def test_format_marks_majors(tmp_path):
    (tmp_path / "a.txt").write_text(LOCK_A)
    (tmp_path / "b.txt").write_text(LOCK_B)
    a, b = diff.load(str(tmp_path / "a.txt")), diff.load(str(tmp_path / "b.txt"))
    text = diff.format_diff(a, b, diff.diff(a.pins, b.pins))
    assert "5 changed (2 upgraded, 1 downgraded, 1 added, 1 removed), 1 unchanged" in text
    assert any(
        line.split()[:4] == ["numpy", "1.26.4", "->", "2.1.0"] and line.endswith("MAJOR")
        for line in text.splitlines()
    )
    assert "new-thing" in text.split("added:")[1]


def test_load_release_and_gitrev(tmp_path):
    root = tmp_path / "repo"
    (root / "releases" / "1.0.0").mkdir(parents=True)
    (root / "releases" / "1.0.0" / "release.toml").write_text('version = "1.0.0"\n')
    (root / "releases" / "1.0.0" / "cpu.txt").write_text(LOCK_A)
    assert diff.load("1.0.0", "cpu", root).pins["jax"].version == "0.9.0"
    assert diff.load("v1.0.0", "cpu", root).label.startswith("1.0.0 (releases/1.0.0/cpu.txt")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    (root / "releases" / "1.0.0" / "cpu.txt").write_text(LOCK_B)
    old = diff.load("HEAD:releases/1.0.0/cpu.txt", "cpu", root)
    assert old.pins["jax"].version == "0.9.0"
    assert diff.load("1.0.0", "cpu", root).pins["jax"].version == "0.10.2"
    with pytest.raises(diff.LockSpecError, match="HEAD:nope.txt"):
        diff.load("HEAD:nope.txt", "cpu", root)
    with pytest.raises(diff.LockSpecError, match="unknown release '9.9'"):
        diff.load("9.9", "cpu", root)
    with pytest.raises(diff.LockSpecError, match="^no/such/file.txt: no such file$"):
        diff.load("no/such/file.txt", "cpu", root)  # a mistyped path, not a list of releases
    with pytest.raises(diff.LockSpecError, match="not a release"):
        diff.load("latest", "cpu", root)


def test_unreadable_lock_is_one_line(tmp_path, monkeypatch):
    locked = tmp_path / "locked.txt"
    locked.write_text(LOCK_A)
    real_read = Path.read_text

    def read_text(self, *args, **kwargs):  # chmod 0 does not stop root, who runs CI
        if self == locked:
            raise PermissionError(13, "Permission denied")
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    with pytest.raises(
        diff.LockSpecError, match=r"locked.txt: cannot read it \(Permission denied\)"
    ):
        diff.load(str(locked), "cpu", tmp_path)


def test_cli_usage_error_exits_2(capsys):
    assert releases_cli.diff(["no-such-lock.txt", "9.9.9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pax diff: error: ") and len(err.strip().splitlines()) == 1


def test_cli_on_the_real_releases(capsys):
    assert releases_cli.diff(["1.3.0", "1.4.0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "cpu locks: 1.3.0 (releases/1.3.0/cpu.txt) -> 1.4.0 (releases/1.4.0/cpu.txt) "
        "(--platform tpu or gpu for the others)\n"
    )
    assert "jax " in out and "test lock" not in out


def test_packages_moved_to_the_test_lock_are_named_so(capsys):
    """1.7.0 locked the test tools apart: what left its cpu lock is in its test lock."""
    assert releases_cli.diff(["1.6.0", "1.7.0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    moved = [n for n in diff.load("1.6.0").pins if n not in diff.load("1.7.0").pins]
    assert lines[1].startswith(f"{len(moved)} changed ({len(moved)} removed: {len(moved)} of them")
    assert lines[2] == "moved to the test lock (releases/1.7.0/test.txt):"
    assert "removed:" not in lines and {line.split()[0] for line in lines[3:]} == set(moved)
    assert releases_cli.diff(["1.6.0", "1.7.0", "--platform", "tpu"]) == 0
    assert capsys.readouterr().out.startswith("tpu locks: 1.6.0 (releases/1.6.0/tpu.txt)")
