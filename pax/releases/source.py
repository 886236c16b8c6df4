"""A release is its source revision plus its locks.

`releases/<version>/release.toml` names `source = "<commit>"`: the commit whose tree the release
freezes (its pax, pyproject.toml and the locks, which at that commit hash to the release's
[locks]). Images of the release pack the pax of that tree (`git archive`), never the working
tree's, so `pax:<version>-<platform>` holds the same code whenever it is built. Branch
r<version> and tag v<version> point at the source; `recreate` puts them back on a clone that
lacks them.
"""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import tarfile
from pathlib import Path

from pax import git, paths
from pax.errors import PaxError
from pax.releases.catalog import LOCK_PLATFORMS, TEST_LOCK, Release, resolve

# What a pax wheel is built from (pyproject.toml's package, its readme and licence).
PACKAGE_PATHS = ("pax", "pyproject.toml", "README.md", "LICENSE")
_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
# `image_recipe = "source"` (written by the cut from 1.8.0 on): the release's images are built by
# its source tree's own recipe and image code (pax.images.frozen); without it, by this checkout's.
IMAGE_RECIPE, OWN_TREE = "image_recipe", "source"
_SOURCE_COMMENT = (
    "# The commit whose tree this release freezes: images pack its pax (docs/releases.md)."
)


class SourceError(PaxError, RuntimeError):
    """A release's source cannot be used; the message is one line saying why and what to do."""


def recorded(release: Release) -> str | None:
    """The source commit release.toml names, or None."""
    value = release.meta.get("source")
    return str(value) if value else None


def builds_own_images(release: Release) -> bool:
    """Whether the release's images are built by its own tree, so their IDs never move."""
    return release.meta.get(IMAGE_RECIPE) == OWN_TREE


def is_shallow(root: Path | None = None) -> bool:
    try:
        return git.run("rev-parse", "--is-shallow-repository", root=root).strip() == "true"
    except git.GitError:
        return False


def has_commit(rev: str, root: Path | None = None) -> bool:
    try:
        git.run("cat-file", "-e", f"{rev}^{{commit}}", root=root)
    except git.GitError:
        return False
    return True


def require(release: Release, root: Path | None = None) -> str:
    """The release's source commit, present in this clone; SourceError naming the fix."""
    rev = recorded(release)
    where = f"releases/{release.version}/release.toml"
    if rev is None:
        raise SourceError(f"release {release.version} names no source commit in {where}")
    if not _SHA_RE.match(rev):
        raise SourceError(f"{where}: source must be a 40-hex commit, got {rev!r}")
    if not has_commit(rev, root):
        fix = (
            "this clone is shallow: run git fetch --unshallow"
            if is_shallow(root)
            else f"fetch it: git fetch origin {rev}"
        )
        raise SourceError(
            f"release {release.version}'s source commit {rev[:12]} is not in this clone; {fix}"
        )
    return rev


def lock_sha256s(release: Release, rev: str, root: Path | None = None) -> dict[str, str | None]:
    """sha256 of each of the release's locks as commit `rev` holds them (None: not there)."""
    shas: dict[str, str | None] = {}
    tests = [TEST_LOCK] if TEST_LOCK in release.meta.get("locks", {}) else []  # none up to 1.6.0
    for platform in [*LOCK_PLATFORMS, *tests]:
        try:
            data = git.blob(rev, f"releases/{release.version}/{platform}.txt", root=root)
        except git.GitError:
            shas[platform] = None
        else:
            shas[platform] = hashlib.sha256(data).hexdigest()
    return shas


def commit_time(rev: str, root: Path | None = None) -> int:
    return int(git.run("log", "-1", "--format=%ct", rev, root=root).strip())


def export(rev: str, dest: Path, paths=PACKAGE_PATHS, root: Path | None = None) -> list[str]:
    """Write the files under `paths` of commit `rev` into dest (those the tree has); returns
    the paths written, relative."""
    present = git.run("ls-tree", "--name-only", rev, "--", *paths, root=root).split()
    if not present:
        return []
    proc = subprocess.run(
        ["git", "archive", "--format=tar", rev, "--", *present],
        cwd=root or paths.ROOT,
        capture_output=True,
    )
    if proc.returncode != 0:
        raise SourceError(f"git archive {rev[:12]} failed: {proc.stderr.decode().strip()}")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        files = [m for m in tar.getmembers() if m.isfile()]
        tar.extractall(dest, members=files, filter="data")
    return sorted(m.name for m in files)


def with_source(toml_text: str, rev: str) -> str:
    """release.toml's text with `source = "<rev>"` after its branch line."""
    if re.search(r"(?m)^source\s*=", toml_text):
        raise SourceError("release.toml names a source already")
    line = f'{_SOURCE_COMMENT}\nsource = "{rev}"\n'
    match = re.search(r"(?m)^branch\s*=.*\n", toml_text)
    at = match.end() if match else len(toml_text)
    return toml_text[:at] + line + toml_text[at:]


def _ref(root: Path, ref: str) -> str | None:
    try:
        return git.run("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", root=root).strip()
    except git.GitError:
        return None


def recreate(version: str, root: Path | None = None, log=print) -> str:
    """Branch r<version> and tag v<version> at the release's source (each made if missing);
    SourceError if either exists pointing at another commit. Returns the source."""
    root = Path(root or paths.ROOT)
    release = resolve(version, root)
    rev = require(release, root)
    branch, tag = f"r{release.version}", f"v{release.version}"
    wrong = [
        f"{what} {name} points at {at[:12]}"
        for what, name, at in (
            ("branch", branch, _ref(root, f"refs/heads/{branch}")),
            ("tag", tag, _ref(root, f"refs/tags/{tag}")),
        )
        if at is not None and at != rev
    ]
    if wrong:
        raise SourceError(
            f"release {release.version}: {' and '.join(wrong)}, not its source {rev[:12]}; "
            "delete or rename it first (git branch -m / git tag -d)"
        )
    made = []
    if _ref(root, f"refs/heads/{branch}") is None:
        git.run("branch", branch, rev, root=root)
        made.append(f"branch {branch}")
    if _ref(root, f"refs/tags/{tag}") is None:
        git.run("tag", "-a", tag, "-m", f"Pax {release.version}", rev, root=root)
        made.append(f"tag {tag}")
    log(
        f"release {release.version}: {', '.join(made) or 'branch and tag already'} at "
        f"source {rev[:12]}"
    )
    return rev
