"""`docker build` of pax:<release>-<platform> from a staged context: the lock, its wheelhouse,
a pax wheel of this checkout, the env's identity file and the image's SBOM; the tag is set only
when the whole build succeeded."""

from __future__ import annotations

import datetime
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
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
from pax.releases import catalog
from pax.releases.catalog import REPO_ROOT

DEFAULT_BASE_IMAGE = catalog.LOCAL_BASE_IMAGE


def build_pax_wheel(dest: Path) -> Path:
    """The pax wheel, built from this checkout (no dependencies)."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("pax-*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory(prefix="pax-wheel-") as tmp:
        # Copy the tracked sources so a stale build/ or egg-info cannot leak into the wheel.
        src = Path(tmp) / "src"
        files = _git_or_none("ls-files", "--cached", "--others", "--exclude-standard")
        if files is None:
            shutil.copytree(
                REPO_ROOT,
                src,
                ignore=shutil.ignore_patterns(
                    ".git", ".nox", ".venv", ".tools", "wheelhouse", "build", "dist", "*.egg-info"
                ),
            )
        else:
            for rel in files.splitlines():
                if not (
                    rel.startswith("pax/") or rel in ("pyproject.toml", "README.md", "LICENSE")
                ):
                    continue
                if not (REPO_ROOT / rel).is_file():
                    continue
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO_ROOT / rel, src / rel)
            if not (src / "README.md").exists():
                (src / "README.md").write_text("Pax\n")
        # The release locks ride along (pax/_releases/<version>/<platform>.txt), so an installed
        # pax finds the nearest release of whatever environment it is in (pax.envinfo).
        for release in catalog.list_releases():
            for platform in catalog.LOCK_PLATFORMS:
                if release.lockfile(platform).is_file():
                    copy = src / "pax" / "_releases" / release.version / f"{platform}.txt"
                    copy.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(release.lockfile(platform), copy)
        # Same sources, same wheel bytes (zip timestamps from SOURCE_DATE_EPOCH), so an unchanged
        # trainer keeps the image's pax layer cached.
        env = {**pip.pip_env(), "SOURCE_DATE_EPOCH": str(source_date_epoch())}
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
    return wheels[0]


def source_date_epoch() -> int:
    """The last commit's time: what the pax wheel's zip entries and the SBOM are dated."""
    return int((_git_or_none("log", "-1", "--format=%ct") or "315532800").strip())


def image_identity(release: str, platform: str, lock: Path) -> envinfo.Identity:
    """The identity file of the image's /opt/venv (the lock sits at LOCK_IN_IMAGE there)."""
    return envinfo.Identity(
        release=release,
        platform=platform,
        lockfile=LOCK_IN_IMAGE,
        lock_sha256=sha256_file(lock),
        python=PYTHON_VERSION,
        locked=lockfile.versions(lockfile.parse_lockfile(lock)),
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
            f"--epoch={source_date_epoch()}",
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
    release: str, platform: str, wheelhouse: Path, pax_wheel: Path, ctx: Path
) -> None:
    """A minimal build context: Dockerfile, the lock, the wheels (hard links when possible)."""
    lock = lock_path(release, platform)
    (ctx / "releases" / release).mkdir(parents=True)
    shutil.copy2(lock, ctx / "releases" / release / f"{platform}.txt")
    shutil.copy2(REPO_ROOT / f"Dockerfile.{platform}", ctx / f"Dockerfile.{platform}")
    (ctx / "ci").mkdir()
    shutil.copy2(REPO_ROOT / "ci" / "verify_image_env.py", ctx / "ci" / "verify_image_env.py")
    wh = ctx / "wheelhouse" / f"{release}-{platform}"
    wh.mkdir(parents=True)
    for w in wheelhouse.glob("*.whl"):
        try:
            os.link(w, wh / w.name)
        except OSError:
            shutil.copy2(w, wh / w.name)
    (ctx / "dist").mkdir()
    shutil.copy2(pax_wheel, ctx / "dist" / pax_wheel.name)
    (ctx / envinfo.IDENTITY_FILE).write_text(image_identity(release, platform, lock).to_json())


def build(
    release: str,
    platform: str,
    base_image: str = DEFAULT_BASE_IMAGE,
    tag: Optional[str] = None,
    wheelhouse: Optional[Path] = None,
    check_hashes: bool = True,
    log=sys.stderr,
) -> str:
    """Build the image; returns its tag. Only a successful build is tagged with the release's name."""
    lock = lock_path(release, platform)
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
    tag = tag or image_ref(release, platform)
    lock_sha = sha256_file(lock)
    tmp_tag = f"{IMAGE_REPO}-build:{release}-{platform}-{uuid.uuid4().hex[:12]}"
    created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    with tempfile.TemporaryDirectory(prefix="pax-ctx-") as tmp:
        ctx = Path(tmp)
        pax_wheel = build_pax_wheel(ctx / "paxwheel")
        stage_context(release, platform, wheelhouse, pax_wheel, ctx / "context")
        sbom_sha = write_sbom(
            release,
            platform,
            lock,
            wheelhouse,
            pax_wheel,
            ctx / "context" / "sbom.cdx.json",
            verify_hashes=check_hashes,
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
            f"REVISION={git.revision() or 'unknown'}",
            "--build-arg",
            f"CREATED={created}",
            str(ctx / "context"),
        ]
        print(
            f"pax images: docker build {tag} (from {base_image}, lock sha256 {lock_sha[:12]})",
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
