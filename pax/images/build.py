"""`docker build` of pax:<release>-<platform> from a staged context: the lock, its wheelhouse,
a pax wheel of the release's source commit (`git archive`; with --dev, of this checkout, tagged
pax:<release>-<platform>-dev.<sha>), the env's identity file and the image's SBOM; the tag is set
only when the whole build succeeded. The recipe (Dockerfile, in-image check, this harness) is
this checkout's."""

from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from pathlib import Path
from typing import Optional

from pax import envinfo, git, lockfile, pip
from pax.images.engine import (
    IMAGE_REPO,
    LOCK_IN_IMAGE,
    ImageError,
    docker,
    image_exists,
    image_ref,
    require_engine,
)
from pax.images.wheelhouse import (
    HASH_MISMATCH_MARKERS,
    PYTHON_VERSION,
    check_wheelhouse,
    lock_path,
    prepare_wheelhouse,
    sha256_file,
    wheelhouse_dir,
)
from pax.releases import catalog, source
from pax.releases.catalog import REPO_ROOT

DEFAULT_BASE_IMAGE = catalog.LOCAL_BASE_IMAGE


@dataclasses.dataclass(frozen=True)
class PaxSource:
    """Where an image's pax comes from: a release's source commit, or (dev) this checkout."""

    revision: str  # the commit; a dev build of a changed tree adds "-dirty"
    dev: bool
    epoch: int  # the commit's time: the wheel's zip entries and the SBOM are dated by it

    @property
    def tag_suffix(self) -> str:
        """ "" for a release's image; "-dev.<short sha>[.dirty]" for the working tree's."""
        if not self.dev:
            return ""
        return f"-dev.{self.revision[:7]}" + (".dirty" if self.revision.endswith("-dirty") else "")


def pax_source(release: str, platform: str, dev: bool = False) -> PaxSource:
    """The release's recorded source commit, present in this clone (ImageError naming the fix);
    with dev, HEAD (and whether pax/ has uncommitted changes)."""
    if dev:
        head = _git_or_none("rev-parse", "HEAD")
        if head is None:
            raise ImageError("--dev builds need a git checkout: the tag names HEAD's commit")
        changed = _git_or_none("status", "--porcelain", "--", "pax")
        return PaxSource(head.strip() + ("-dirty" if changed else ""), True, source_date_epoch())
    rel = catalog.load(lock_path(release, platform).parent)
    try:
        rev = source.require(rel, REPO_ROOT)
    except source.SourceError as e:
        raise ImageError(
            f"{e} (or build this checkout on its locks: ./noxw -s build -- {release} "
            f"{platform} --dev)"
        ) from None
    return PaxSource(rev, False, source.commit_time(rev, REPO_ROOT))


def dev_ref(release: str, platform: str) -> str:
    """The tag `build --dev` gives this checkout's image: pax:R-P-dev.<sha>[.dirty]."""
    return image_ref(release, platform) + pax_source(release, platform, dev=True).tag_suffix


def recipe_revision(platform: str) -> str:
    """HEAD, whose Dockerfile, in-image check and harness build every image; "-dirty" when
    those files have uncommitted changes."""
    head = (_git_or_none("rev-parse", "HEAD") or "unknown").strip()
    recipe = (f"Dockerfile.{platform}", "ci/verify_image_env.py", "pax/lockfile.py", "pax/images")
    changed = _git_or_none("status", "--porcelain", "--", *recipe)
    return head + ("-dirty" if changed else "")


def _copy_checkout(src: Path) -> None:
    """This checkout's package files (tracked and new, not ignored) into src."""
    files = _git_or_none("ls-files", "--cached", "--others", "--exclude-standard")
    if files is None:  # a source tree without .git
        shutil.copytree(
            REPO_ROOT,
            src,
            ignore=shutil.ignore_patterns(
                ".git", ".nox", ".venv", ".tools", "wheelhouse", "build", "dist", "*.egg-info"
            ),
        )
        return
    for rel in files.splitlines():
        if not (rel.startswith("pax/") or rel in source.PACKAGE_PATHS):
            continue
        if (REPO_ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / rel, src / rel)


def build_pax_wheel(dest: Path, origin: PaxSource, own_lock: str | None = None) -> Path:
    """The pax wheel (no dependencies): from `git archive` of the release's source commit, or
    for a dev build from this checkout's files. A stale build/ or egg-info cannot leak in."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("pax-*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory(prefix="pax-wheel-") as tmp:
        src, releases_root = Path(tmp) / "src", Path(tmp) / "locks"
        if origin.dev:
            _copy_checkout(src)
            releases_root = REPO_ROOT
        else:
            source.export(origin.revision, src, root=REPO_ROOT)
            # The locks the source tree holds (frozen: the same bytes as today's copies), so the
            # wheel does not change when later releases are cut.
            source.export(origin.revision, releases_root, paths=("releases",), root=REPO_ROOT)
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
        # Same sources, same wheel bytes (zip timestamps from SOURCE_DATE_EPOCH), so an unchanged
        # trainer keeps the image's pax layer cached.
        env = {**pip.pip_env(), "SOURCE_DATE_EPOCH": str(origin.epoch)}
        r = subprocess.run(
            [pip.pip_python(), "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dest), str(src)],
            env=env,
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            last = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()][-1:] or [""]
            raise ImageError(f"building the pax wheel failed: {last[0].strip()}")
    wheels = sorted(dest.glob("pax-*.whl"))
    if len(wheels) != 1:
        raise ImageError(f"expected one pax wheel in {dest}, found {len(wheels)}")
    if own_lock:  # pax/_releases/<version>/<platform>.txt: at least the image's own lock
        with zipfile.ZipFile(wheels[0]) as wheel:
            if own_lock not in wheel.namelist():
                raise ImageError(f"the pax wheel {wheels[0].name} lacks {own_lock}")
    return wheels[0]


def source_date_epoch() -> int:
    """The last commit's time: what a dev build's pax wheel and SBOM are dated."""
    return int((_git_or_none("log", "-1", "--format=%ct") or "315532800").strip())


def image_identity(
    release: str, platform: str, lock: Path, revision: str | None = None
) -> envinfo.Identity:
    """The identity file of the image's /opt/venv (the lock sits at LOCK_IN_IMAGE there)."""
    return envinfo.Identity(
        release=release,
        platform=platform,
        lockfile=LOCK_IN_IMAGE,
        lock_sha256=sha256_file(lock),
        python=PYTHON_VERSION,
        locked=lockfile.versions(lockfile.parse_lockfile(lock)),
        source_revision=revision,
    )


def _sbom_python() -> str:
    """An interpreter with cyclonedx-python-lib: this one, else the tools venv's (./noxw)."""
    if importlib.util.find_spec("cyclonedx") is not None:
        return sys.executable
    tools = REPO_ROOT / ".tools" / "venv" / "bin" / "python"
    if tools.exists():
        return str(tools)
    raise ImageError(
        "the image's SBOM needs cyclonedx-python-lib, which the tools venv has: run ./noxw -l once"
    )


def write_sbom(
    release: str,
    platform: str,
    lock: Path,
    wheelhouse: Path,
    pax_wheel: Path,
    out: Path,
    verify_hashes: bool = True,
    epoch: int | None = None,
) -> str:
    """Generate the SBOM into out (pax.images.sbom, in an interpreter that has the library);
    returns its sha256."""
    r = subprocess.run(
        [
            _sbom_python(),
            "-m",
            "pax.images.sbom",
            str(lock),
            str(wheelhouse),
            str(pax_wheel),
            f"--release={release}",
            f"--platform={platform}",
            f"--epoch={source_date_epoch() if epoch is None else epoch}",
            f"--out={out}",
            *([] if verify_hashes else ["--no-verify-hashes"]),
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    if r.returncode != 0:
        last = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()][-1:] or [""]
        msg = last[0].removeprefix("pax images: error: ")
        if msg.startswith("wheel hash mismatch"):
            raise ImageError(f"{msg}; no image tagged")
        raise ImageError(f"writing the SBOM failed: {msg}")
    digest = sha256_file(out)
    if r.stdout.strip() != digest:
        raise ImageError(f"the SBOM at {out} changed while it was written")
    return digest


def stage_context(
    release: str,
    platform: str,
    wheelhouse: Path,
    pax_wheel: Path,
    ctx: Path,
    revision: str | None = None,
) -> None:
    """A minimal build context: the recipe (this checkout's Dockerfile and in-image check, with
    its lock reader), the lock, the wheels (hard links when possible), the pax wheel."""
    lock = lock_path(release, platform)
    (ctx / "releases" / release).mkdir(parents=True)
    shutil.copy2(lock, ctx / "releases" / release / f"{platform}.txt")
    shutil.copy2(REPO_ROOT / f"Dockerfile.{platform}", ctx / f"Dockerfile.{platform}")
    (ctx / "ci").mkdir()
    shutil.copy2(REPO_ROOT / "ci" / "verify_image_env.py", ctx / "ci" / "verify_image_env.py")
    shutil.copy2(REPO_ROOT / "pax" / "lockfile.py", ctx / "ci" / "pax_lockfile.py")
    wh = ctx / "wheelhouse" / f"{release}-{platform}"
    wh.mkdir(parents=True)
    for w in wheelhouse.glob("*.whl"):
        try:
            os.link(w, wh / w.name)
        except OSError:
            shutil.copy2(w, wh / w.name)
    (ctx / "dist").mkdir()
    shutil.copy2(pax_wheel, ctx / "dist" / pax_wheel.name)
    identity = image_identity(release, platform, lock, revision)
    (ctx / envinfo.IDENTITY_FILE).write_text(identity.to_json())


def build(
    release: str,
    platform: str,
    base_image: str = DEFAULT_BASE_IMAGE,
    tag: Optional[str] = None,
    wheelhouse: Optional[Path] = None,
    check_hashes: bool = True,
    dev: bool = False,
    log=sys.stderr,
) -> str:
    """Build the image; returns its tag. Only a successful build is tagged. Its pax is the
    release's source commit's (`git archive`), or with dev this checkout's, tagged
    pax:RELEASE-PLATFORM-dev.<sha>[.dirty]; the recipe is this checkout's either way."""
    lock = lock_path(release, platform)
    origin = pax_source(release, platform, dev=dev)
    require_engine()
    if not image_exists(base_image):
        hint = (
            "build it with ci/base-image.sh"
            if base_image == DEFAULT_BASE_IMAGE
            else f"docker pull {base_image}"
        )
        raise ImageError(f"base image {base_image} is not present locally; {hint}")
    default_wheelhouse = wheelhouse is None
    wheelhouse = Path(wheelhouse) if wheelhouse else wheelhouse_dir(release, platform)
    if check_hashes:
        try:
            check_wheelhouse(lock, wheelhouse)  # offline when the wheelhouse is complete
        except ImageError as e:
            if not (default_wheelhouse and "lacks wheels" in str(e)):
                raise
            prepare_wheelhouse(release, platform, wheelhouse, log=log)  # fetch what is missing
    version = lock.parent.name + origin.tag_suffix  # 1.4.0, or 1.6.0-dev.<sha>
    tag = tag or f"{image_ref(lock.parent.name, platform)}{origin.tag_suffix}"
    lock_sha = sha256_file(lock)
    recipe = recipe_revision(platform)
    tmp_tag = f"{IMAGE_REPO}-build:{release}-{platform}-{uuid.uuid4().hex[:12]}"
    # Dated by its inputs (the later of the source's and the recipe's commits), not the clock, so
    # a rebuild of the same source and recipe is the same image.
    epoch = max(origin.epoch, source_date_epoch())
    created = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    own_lock = None
    if catalog.looks_like_release(lock.parent.name) and lock.parent.name != catalog.NIGHTLY:
        own_lock = f"pax/_releases/{lock.parent.name}/{platform}.txt"
    with tempfile.TemporaryDirectory(prefix="pax-ctx-") as tmp:
        ctx = Path(tmp)
        pax_wheel = build_pax_wheel(ctx / "paxwheel", origin, own_lock)
        stage_context(
            release, platform, wheelhouse, pax_wheel, ctx / "context", revision=origin.revision
        )
        sbom_sha = write_sbom(
            release,
            platform,
            lock,
            wheelhouse,
            pax_wheel,
            ctx / "context" / "sbom.cdx.json",
            verify_hashes=check_hashes,
            epoch=origin.epoch,
        )
        cmd = [
            "build",
            "--network",
            "none",
            "--pull=false",
            "--force-rm",
            "-f",
            str(ctx / "context" / f"Dockerfile.{platform}"),
            "-t",
            tmp_tag,
            "--build-arg",
            f"RELEASE={release}",
            "--build-arg",
            f"BASE_IMAGE={base_image}",
            "--build-arg",
            f"LOCK_SHA256={lock_sha}",
            "--build-arg",
            f"SBOM_SHA256={sbom_sha}",
            "--build-arg",
            f"REVISION={origin.revision}",
            "--build-arg",
            f"RECIPE_REVISION={recipe}",
            "--build-arg",
            f"VERSION={version}",
            "--build-arg",
            f"IMAGE={tag}",
            "--build-arg",
            f"CREATED={created}",
            str(ctx / "context"),
        ]
        what = "this checkout" if origin.dev else "source"
        print(
            f"pax images: docker build {tag} (from {base_image}, lock sha256 {lock_sha[:12]}, "
            f"pax of {what} {origin.revision[:12]}, recipe {recipe[:12]})",
            file=log,
        )
        t0 = time.monotonic()
        r = docker(*cmd, check=False, capture=True)
        (ctx / "build.log").write_text(r.stdout + r.stderr)
        if r.returncode != 0:
            if image_exists(tmp_tag):
                docker("rmi", tmp_tag, check=False)
            out = r.stdout + r.stderr
            saved = _save_log(out, release, platform)
            if any(m in out for m in HASH_MISMATCH_MARKERS):
                raise ImageError(
                    f"wheel hash mismatch: pip refused a wheel in {wheelhouse} that does not "
                    f"match {lock} (tampered or corrupt wheelhouse); delete it and rerun; "
                    f"no image tagged; log {saved}"
                )
            errs = [
                ln
                for ln in out.splitlines()
                if "pax-verify" in ln or "ERROR" in ln or "error" in ln
            ]
            tail = (errs or [ln for ln in out.splitlines() if ln.strip()] or ["(no output)"])[
                -1
            ].strip()
            raise ImageError(f"docker build of {tag} failed: {tail}; no image tagged; log {saved}")
    docker("tag", tmp_tag, tag)
    docker("rmi", tmp_tag, check=False)
    saved = _save_log(r.stdout + r.stderr, release, platform)
    size = docker("image", "inspect", "-f", "{{.Size}}", tag).stdout.strip()
    print(
        f"pax images: built {tag} in {time.monotonic() - t0:.0f}s, "
        f"{int(size) / 1e6:.0f} MB (log {saved})",
        file=log,
    )
    return tag


def _save_log(text: str, release: str, platform: str) -> Path:
    d = Path(tempfile.gettempdir()) / "pax-build-logs"
    d.mkdir(exist_ok=True)
    p = d / f"{release}-{platform}-{int(time.time())}.log"
    p.write_text(text)
    return p


def _git_or_none(*args: str) -> str | None:
    """git's output, or None outside a checkout (a source tree without .git still builds)."""
    try:
        return git.run(*args)
    except git.GitError:
        return None
