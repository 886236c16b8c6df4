"""The pax wheel an image installs: built from `git archive` of the release's source commit, or
for a dev image from this checkout's files, or (a frozen release, pax.images.stage) from the
release's own tree by its own pinned setuptools; it carries the release locks (pax/_releases),
the same bytes whenever its sources are the same."""

from __future__ import annotations

import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from pax import pip
from pax.environments import install
from pax.errors import last_line
from pax.images.engine import ImageError
from pax.images.target import Target, git_or_none
from pax.paths import ROOT
from pax.releases import catalog, source


def _copy_checkout(src: Path) -> None:
    """This checkout's package files (tracked and new, not ignored) into src."""
    files = git_or_none("ls-files", "--cached", "--others", "--exclude-standard")
    if files is None:  # a source tree without .git
        shutil.copytree(
            ROOT,
            src,
            ignore=shutil.ignore_patterns(
                ".git", ".nox", ".venv", ".tools", "wheelhouse", "build", "dist", "*.egg-info"
            ),
        )
        return
    for rel in files.splitlines():
        if not (rel.startswith("pax/") or rel in source.PACKAGE_PATHS):
            continue
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)


def build(dest: Path, target: Target) -> Path:
    """The pax wheel (no dependencies): from `git archive` of the release's source commit, or
    for a dev build from this checkout's files, built in an isolated environment by pip. A
    stale build/ or egg-info cannot leak in."""
    origin = target.source
    with tempfile.TemporaryDirectory(prefix="pax-wheel-") as tmp:
        src, releases_root = Path(tmp) / "src", Path(tmp) / "locks"
        if origin.dev:
            _copy_checkout(src)
            releases_root = ROOT
        else:
            source.export(origin.revision, src, root=ROOT)
            # The locks the source tree holds (frozen: the same bytes as today's copies), so the
            # wheel does not change when later releases are cut.
            source.export(origin.revision, releases_root, paths=("releases",), root=ROOT)
        return _wheel(src, releases_root, dest, target, pip.pip_python(), isolated=True)


def from_tree(tree: Path, dest: Path, target: Target) -> Path:
    """The pax wheel of a release's own tree (`tree`: its package files and releases/), built by
    this interpreter's setuptools without build isolation, so the backend is the one this
    interpreter pins, not the newest on the index."""
    with tempfile.TemporaryDirectory(prefix="pax-wheel-") as tmp:
        src = Path(tmp) / "src"
        for name in source.PACKAGE_PATHS:
            if (tree / name).is_dir():
                shutil.copytree(tree / name, src / name)
            elif (tree / name).is_file():
                src.mkdir(parents=True, exist_ok=True)
                shutil.copy2(tree / name, src / name)
        return _wheel(src, tree, dest, target, sys.executable, isolated=False)


def _wheel(
    src: Path, releases_root: Path, dest: Path, target: Target, python: str, isolated: bool
) -> Path:
    """Build the wheel of the package files in `src` into `dest`, with the locks of the
    releases under `releases_root` inside it."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("pax-*.whl"):
        old.unlink()
    if not (src / "README.md").exists():  # pyproject's readme; early trees had none
        (src / "README.md").write_text("Pax\n")
    # The release locks ride along (pax/_releases/<version>/<platform>.txt), so an installed
    # pax finds the nearest release of whatever environment it is in (pax.envinfo).
    for rel in catalog.list_releases(releases_root):
        for lock_platform in catalog.LOCK_PLATFORMS:
            if rel.lockfile(lock_platform).is_file():
                copy = src / "pax" / "_releases" / rel.version / f"{lock_platform}.txt"
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(rel.lockfile(lock_platform), copy)
    pyproject = src / "pyproject.toml"
    if "_releases" not in pyproject.read_text():
        # Trees older than the package-data line: setuptools takes the locks from a manifest.
        with open(src / "MANIFEST.in", "a") as f:
            f.write("recursive-include pax/_releases *.txt\n")
    # Same sources, same wheel bytes (zip timestamps from SOURCE_DATE_EPOCH): the image's pax
    # layer, its SBOM and its provenance stay the same bytes too.
    epoch = {"SOURCE_DATE_EPOCH": str(target.source.epoch)}
    r = install.build_wheel(src, dest, python, isolated=isolated, env=epoch)
    if r.returncode != 0:
        raise ImageError(f"building the pax wheel failed: {last_line(r.stderr, r.stdout)}")
    wheels = sorted(dest.glob("pax-*.whl"))
    if len(wheels) != 1:
        raise ImageError(f"expected one pax wheel in {dest}, found {len(wheels)}")
    # A cut release's wheel carries at least the image's own lock.
    if catalog.looks_like_release(target.version) and target.version != catalog.NIGHTLY:
        own_lock = f"pax/_releases/{target.version}/{target.platform}.txt"
        with zipfile.ZipFile(wheels[0]) as wheel:
            if own_lock not in wheel.namelist():
                raise ImageError(f"the pax wheel {wheels[0].name} lacks {own_lock}")
    return wheels[0]
