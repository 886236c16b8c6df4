"""Diff two pip-compile lockfiles: upgraded, downgraded, added, removed; major jumps marked.

A lock may be named four ways (`load`):

  1.4.0 / v1.4.0 / nightly           a release: releases/<version>/<platform>.txt
  path/to/lock.txt                    a lockfile on disk
  GITREV:path/to/lock.txt             a lockfile as committed at GITREV (`git show`)
  image                               inside a pax image: the lock it was built from

  python -m pax.releases diff A B [--platform cpu] [--json]      (nox: ./noxw -s diff -- A B)

Locks, pins and version order are pax.lockfile's.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from pax import git, lockfile, paths
from pax.errors import UsageError
from pax.lockfile import Lock, Pin, version_key
from pax.releases import catalog as dist_release

KINDS = ("upgraded", "downgraded", "added", "removed", "rebuilt")


class LockSpecError(UsageError, ValueError):
    """A lock name that is neither a release, a file nor `GITREV:path`."""


@dataclasses.dataclass(frozen=True)
class Change:
    name: str
    old: Pin | None  # None: added
    new: Pin | None  # None: removed

    @property
    def old_version(self) -> str | None:
        return self.old.version if self.old else None

    @property
    def new_version(self) -> str | None:
        return self.new.version if self.new else None

    @property
    def kind(self) -> str:
        if self.old is None:
            return "added"
        if self.new is None:
            return "removed"
        old, new = version_key(self.old.version), version_key(self.new.version)
        if old < new:
            return "upgraded"
        if old > new:
            return "downgraded"
        return "rebuilt"  # same version, other artifacts (hashes)

    @property
    def major(self) -> bool:
        """A jump across a major version (for 0.x, across a minor: semver's 0.y is major)."""
        if self.old is None or self.new is None:
            return False
        a, b = version_key(self.old.version).release, version_key(self.new.version).release
        if not a or not b:
            return False
        if a[0] != b[0]:
            return True
        return a[0] == 0 and (a[1:2] or (0,)) != (b[1:2] or (0,))

    def describe(self) -> str:
        """`jax 0.9.0 -> 0.10.2`, `foo (added) 1.0`, `bar 1.2 (removed)`."""
        if self.old is None:
            return f"{self.name} (added) {self.new_version}"
        if self.new is None:
            return f"{self.name} {self.old_version} (removed)"
        return f"{self.name} {self.old_version} -> {self.new_version}"

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "old": self.old_version,
            "new": self.new_version,
            "major": self.major,
        }


# Loading ------------------------------------------------------------------------------------------


def _git_show(rev: str, path: str, root: Path) -> str:
    try:
        return git.run("show", f"{rev}:{path}", root=root)
    except git.GitError as err:
        raise LockSpecError(f"{rev}:{path}: {err}") from None


def _read_lock(path: Path, spec: str) -> str:
    try:
        return path.read_text()
    except OSError as err:  # unreadable (permissions), or a file that went away
        raise LockSpecError(f"{spec}: cannot read it ({err.strerror or err})") from None


IMAGE = "image"  # the lock of the pax image this runs in


def load(spec: str, platform: str = "cpu", root: Path | None = None) -> Lock:
    """Resolve a release name, a lockfile path, `GITREV:path` or `image` into its pins."""
    if spec == IMAGE:
        return _image_lock(platform)
    root = root or paths.ROOT
    if platform not in dist_release.LOCK_PLATFORMS:
        raise LockSpecError(
            f"unknown platform {platform!r}; platforms: {', '.join(dist_release.LOCK_PLATFORMS)}"
        )
    path = Path(spec)
    if not path.is_absolute() and not path.exists():
        path = root / spec
    try:
        if path.is_file():
            return Lock.parse(_read_lock(path, spec), spec)
        if path.is_dir() and (path / f"{platform}.txt").is_file():  # a release directory
            text = (path / f"{platform}.txt").read_text()
            return Lock.parse(text, f"{spec} ({platform})", spec)
        if ":" in spec and not dist_release.looks_like_release(spec):
            rev, _, inner = spec.partition(":")
            if not rev or not inner:
                raise LockSpecError(f"{spec!r}: write GITREV:path/to/lock.txt")
            return Lock.parse(_git_show(rev, inner, root), spec)
        if dist_release.looks_like_release(spec):
            rel = dist_release.resolve(spec, root)
            lock_path = rel.lockfile(platform)
            if not lock_path.is_file():
                raise LockSpecError(f"release {rel.version} has no {platform} lock ({lock_path})")
            shown = lock_path.relative_to(root) if lock_path.is_relative_to(root) else lock_path
            return Lock.read(
                lock_path, f"{rel.version} ({shown})", release=rel.version, platform=platform
            )
    except dist_release.UnknownRelease as err:
        raise LockSpecError(str(err)) from err
    except lockfile.LockfileError as err:
        raise LockSpecError(str(err)) from err
    if os.sep in spec or spec.endswith(".txt"):  # meant as a path: say so, not list releases
        raise LockSpecError(f"{spec}: no such file")
    known = ", ".join(r.version for r in dist_release.list_releases(root)) or "none"
    raise LockSpecError(
        f"{spec!r} is not a release ({known}), a lockfile, GITREV:path/to/lock.txt, nor `image`"
    )


def _image_lock(platform: str) -> Lock:
    """Inside a pax image: $PAX_LOCKFILE, labelled with the image's name."""
    path = os.environ.get("PAX_LOCKFILE")
    if not path:
        raise LockSpecError(
            "`image` is the lock of the pax image this runs in ($PAX_LOCKFILE), which is not "
            "set here: run inside a pax image, or name a release or a lockfile"
        )
    lock = load(path, platform)
    name = os.environ.get("PAX_IMAGE")
    return dataclasses.replace(lock, label=f"image {name} ({path})" if name else f"image ({path})")


# Diffing ------------------------------------------------------------------------------------------


def diff(old: dict[str, Pin], new: dict[str, Pin]) -> list[Change]:
    """Every package whose pin differs (version, or the same version with other hashes)."""
    changes = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a is not None and b is not None and a.version == b.version:
            if not a.hashes or not b.hashes or set(a.hashes) == set(b.hashes):
                continue
        changes.append(Change(name, a, b))
    return changes


def summary_counts(changes: list[Change]) -> dict[str, int]:
    counts = {kind: 0 for kind in KINDS}
    for change in changes:
        counts[change.kind] += 1
    return counts


def moved_to_test_lock(b: Lock, changes: list[Change]) -> tuple[str | None, set[str]]:
    """(B's test lock, the removed packages it pins) where B is a release's cpu lock: packages
    a newer release moved from the cpu lock to its test lock, which are no loss."""
    if b.release is None or b.platform != "cpu":
        return None, set()
    try:
        test_lock = dist_release.resolve(b.release).test_lock
    except dist_release.UnknownRelease:
        return None, set()
    if test_lock is None:
        return None, set()
    pinned = set(Lock.read(test_lock).pins)
    shown = test_lock.relative_to(paths.ROOT) if test_lock.is_relative_to(paths.ROOT) else test_lock
    return str(shown), {c.name for c in changes if c.kind == "removed" and c.name in pinned}


def format_diff(a: Lock, b: Lock, changes: list[Change]) -> str:
    counts = summary_counts(changes)
    unchanged = len(set(a.pins) & set(b.pins)) - sum(
        1 for c in changes if c.old is not None and c.new is not None
    )
    test_lock, moved = moved_to_test_lock(b, changes)
    parts = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    if moved:
        parts += f": {len(moved)} of them moved to the test lock"
    platform = b.platform or a.platform
    others = [p for p in dist_release.LOCK_PLATFORMS if p != platform]
    lines = [
        (f"{platform} locks: " if platform else "")
        + f"{a.label} -> {b.label}"
        + (f" (--platform {' or '.join(others)} for the others)" if platform else ""),
        f"{len(changes)} changed ({parts or 'nothing'}), {unchanged} unchanged",
    ]
    width = max((len(c.name) for c in changes), default=0)
    vwidth = max((len(c.old_version or "") for c in changes), default=0)
    sections = [
        (kind, [c for c in changes if c.kind == kind and c.name not in moved]) for kind in KINDS
    ]
    sections.append(
        (f"moved to the test lock ({test_lock})", [c for c in changes if c.name in moved])
    )
    for kind, rows in sections:
        if not rows:
            continue
        lines.append(f"{kind}:")
        for c in rows:
            if c.kind == "added":
                text = f"  {c.name:<{width}}  {'':<{vwidth}}    {c.new_version}"
            elif c.kind == "removed":
                text = f"  {c.name:<{width}}  {c.old_version}"
            else:
                text = f"  {c.name:<{width}}  {c.old_version:<{vwidth}} -> {c.new_version}"
            if c.major:
                text += "   MAJOR"
            lines.append(text.rstrip())
    majors = sum(c.major for c in changes)
    if majors:
        lines.append(f"MAJOR: {majors} major-version jump(s) (for 0.x versions, the minor)")
    return "\n".join(lines)
