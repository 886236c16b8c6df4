"""pax:<release>-<platform>, built by buildah (pax.images.buildah) from a staged context: the lock,
its wheelhouse, a pax wheel of the release's source commit (`git archive`; with --dev, of this
checkout, tagged pax:<release>-<platform>-dev.<sha>), the env's identity file, the image's SBOM
and its provenance statement; the tag is set only when the whole build succeeded. The recipe
(Dockerfile, in-image check) is this checkout's, named in the image by its content's sha256, and
everything is dated by the source commit, so the same release and recipe on the same base give
the same image ID whenever they are built."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Optional

from pax import envinfo, git, lockfile, paths, pip
from pax.images import buildah, provenance, reproduce
from pax.images.engine import (
    IMAGE_REPO,
    LOCK_IN_IMAGE,
    ImageError,
    docker,
    image_exists,
    image_ref,
    label,
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
from pax.paths import ROOT
from pax.releases import catalog, source

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
        rev = source.require(rel, ROOT)
    except source.SourceError as e:
        raise ImageError(
            f"{e} (or build this checkout on its locks: ./noxw -s build -- {release} "
            f"{platform} --dev)"
        ) from None
    return PaxSource(rev, False, source.commit_time(rev, ROOT))


def dev_ref(release: str, platform: str) -> str:
    """The tag `build --dev` gives this checkout's image: pax:R-P-dev.<sha>[.dirty]."""
    return image_ref(release, platform) + pax_source(release, platform, dev=True).tag_suffix


def _copy_checkout(src: Path) -> None:
    """This checkout's package files (tracked and new, not ignored) into src."""
    files = _git_or_none("ls-files", "--cached", "--others", "--exclude-standard")
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
            releases_root = ROOT
        else:
            source.export(origin.revision, src, root=ROOT)
            # The locks the source tree holds (frozen: the same bytes as today's copies), so the
            # wheel does not change when later releases are cut.
            source.export(origin.revision, releases_root, paths=("releases",), root=ROOT)
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
    tools = paths.TOOLS_VENV / "bin" / "python"
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
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
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
    """A minimal build context: the recipe (this checkout's Dockerfiles for the platform, joined
    into one, and the in-image check with its lock reader), the lock, the wheels (hard links when
    possible), the pax wheel."""
    lock = lock_path(release, platform)
    (ctx / "releases" / release).mkdir(parents=True)
    shutil.copy2(lock, ctx / "releases" / release / f"{platform}.txt")
    recipe = [ROOT / name for name in dockerfiles(platform)]
    (ctx / f"Dockerfile.{platform}").write_text("\n".join(f.read_text() for f in recipe))
    (ctx / "ci").mkdir()
    shutil.copy2(ROOT / "ci" / "verify_image_env.py", ctx / "ci" / "verify_image_env.py")
    shutil.copy2(ROOT / "pax" / "lockfile.py", ctx / "ci" / "pax_lockfile.py")
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


def date_context(ctx: Path, epoch: int) -> None:
    """Date every staged file and folder by the source commit, so a build step that records a
    file's time (Python's timestamp .pyc) writes the same bytes in any checkout. The wheelhouse's
    wheels are hard links to the user's files and stay as they are: nothing in a layer keeps a
    wheel file's time."""
    wheels = ctx / "wheelhouse"
    for path in [ctx, *ctx.rglob("*")]:
        if wheels not in path.parents:
            os.utime(path, (epoch, epoch))


def dockerfiles(platform: str) -> list[str]:
    """The Dockerfiles a platform's image is built from, in order: Dockerfile.tpu is the whole
    recipe (PLATFORM a build argument), another platform's file adds its last lines to it."""
    return ["Dockerfile.tpu"] + ([] if platform == "tpu" else [f"Dockerfile.{platform}"])


def recipe_files(platform: str) -> dict[str, Path]:
    """This checkout's files that make every image (the recipe), by their name in the checkout."""
    return {
        **{name: ROOT / name for name in dockerfiles(platform)},
        "ci/verify_image_env.py": ROOT / "ci" / "verify_image_env.py",
        "ci/pax_lockfile.py": ROOT / "pax" / "lockfile.py",
    }


def recipe_sha256(platform: str) -> str:
    """The recipe by content, not by commit: a new commit that leaves it as it was builds the
    same image."""
    digest = hashlib.sha256()
    for name, path in sorted(recipe_files(platform).items()):
        digest.update(f"{name}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest()


@dataclasses.dataclass
class Staged:
    """A build's context and arguments: everything that decides the image's bytes."""

    context: Path
    dockerfile: Path
    args: dict[str, str]
    epoch: int
    tag: str


@contextlib.contextmanager
def staged(
    release: str,
    platform: str,
    base_image: str = DEFAULT_BASE_IMAGE,
    tag: Optional[str] = None,
    wheelhouse: Optional[Path] = None,
    check_hashes: bool = True,
    dev: bool = False,
    log=sys.stderr,
):
    """Stage a build in a temporary directory (removed on exit): the pax wheel of the release's
    source commit (`git archive`), or with dev of this checkout (tagged
    pax:RELEASE-PLATFORM-dev.<sha>[.dirty]); the lock's wheels; the recipe (this checkout's);
    the env's identity file, the SBOM and the provenance statement."""
    lock = lock_path(release, platform)
    origin = pax_source(release, platform, dev=dev)
    base_id = buildah.base_id(base_image)
    default_wheelhouse = wheelhouse is None
    wheelhouse = Path(wheelhouse) if wheelhouse else wheelhouse_dir(release, platform)
    if check_hashes:
        try:
            check_wheelhouse(lock, wheelhouse)  # offline when the wheelhouse is complete
        except ImageError as e:
            if not (default_wheelhouse and "lacks wheels" in str(e)):
                raise
            prepare_wheelhouse(release, platform, wheelhouse, log=log)  # fetch what is missing
    name = lock.parent.name
    version = name + origin.tag_suffix  # 1.4.0, or 1.6.0-dev.<sha>
    tag = tag or f"{image_ref(name, platform)}{origin.tag_suffix}"
    own_lock = None
    if catalog.looks_like_release(name) and name != catalog.NIGHTLY:
        own_lock = f"pax/_releases/{name}/{platform}.txt"
    with tempfile.TemporaryDirectory(prefix="pax-ctx-") as tmp:
        ctx = Path(tmp) / "context"
        pax_wheel = build_pax_wheel(Path(tmp) / "paxwheel", origin, own_lock)
        stage_context(release, platform, wheelhouse, pax_wheel, ctx, revision=origin.revision)
        sbom = ctx / "sbom.cdx.json"
        sbom_sha = write_sbom(
            release, platform, lock, wheelhouse, pax_wheel, sbom, check_hashes, origin.epoch
        )
        command = ["./noxw", "-s", "build", "--", release, platform, *(["--dev"] if dev else [])]
        statement = provenance.statement(
            catalog.load(lock.parent),
            platform,
            origin.revision,
            base_id,
            recipe=recipe_files(platform),
            subjects={
                f"releases/{name}/{platform}.txt": lock,
                f"dist/{pax_wheel.name}": pax_wheel,
                "sbom.cdx.json": sbom,
            },
            command=command,
            builder_version=buildah.version(),
        )
        args = {
            "PLATFORM": platform,
            "RELEASE": release,
            "BASE_IMAGE": base_id,
            "LOCK_SHA256": sha256_file(lock),
            "SBOM_SHA256": sbom_sha,
            "PROVENANCE_SHA256": provenance.write(statement, ctx / provenance.FILENAME),
            "REVISION": origin.revision,
            "RECIPE_SHA256": recipe_sha256(platform),
            "VERSION": version,
            "IMAGE": tag,
            "SOURCE_DATE_EPOCH": str(origin.epoch),
            "CREATED": datetime.datetime.fromtimestamp(
                origin.epoch, datetime.timezone.utc
            ).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        date_context(ctx, origin.epoch)
        what = "this checkout" if origin.dev else "source"
        print(
            f"pax images: build {tag} (base {base_id[7:19]}, lock sha256 "
            f"{args['LOCK_SHA256'][:12]}, pax of {what} {origin.revision[:12]}, recipe "
            f"{args['RECIPE_SHA256'][:12]})",
            file=log,
        )
        yield Staged(ctx, ctx / f"Dockerfile.{platform}", args, origin.epoch, tag)


def _build_in_store(stage: Staged, store_tag: str, release: str, platform: str) -> str:
    """buildah on a staged context; the image ID, or ImageError with the failing step's line."""
    try:
        image_id, _ = buildah.build(
            stage.context, stage.dockerfile, store_tag, stage.args, stage.epoch
        )
        return image_id
    except buildah.BuildFailed as e:
        saved = _save_log(e.output, release, platform)
        if any(m in e.output for m in HASH_MISMATCH_MARKERS):
            raise ImageError(
                f"wheel hash mismatch: pip refused a wheel that does not match "
                f"releases/{release}/{platform}.txt (tampered or corrupt wheelhouse); delete "
                f"wheelhouse/{release}-{platform} and rerun; no image tagged; log {saved}"
            ) from None
        lines = e.output.splitlines()
        errs = [ln for ln in lines if "pax-verify" in ln or "ERROR" in ln or "error" in ln]
        tail = (errs or [ln for ln in lines if ln.strip()] or ["(no output)"])[-1].strip()
        raise ImageError(
            f"build of {stage.tag} failed: {tail}; no image tagged; log {saved}"
        ) from None


def build(release: str, platform: str, log=sys.stderr, **options) -> str:
    """Build the image (options: `staged`'s) into the Docker engine; returns its tag, set only
    when the whole build succeeded."""
    lock_path(release, platform)  # a wrong release or platform is a usage error, engine or not
    require_engine()
    with staged(release, platform, log=log, **options) as stage:
        # The provenance digest covers every input (source, locks, wheels, base, recipe,
        # builder) and the build reproduces, so an image that carries it is this build's result.
        built = image_exists(stage.tag) and label(stage.tag, provenance.LABEL)
        if built == stage.args["PROVENANCE_SHA256"]:
            print(f"pax images: {stage.tag} is up to date (same provenance)", file=log)
            return stage.tag
        store_tag = f"localhost/{IMAGE_REPO}-build:{release}-{platform}-{os.getpid()}"
        t0 = time.monotonic()
        try:
            image_id = _build_in_store(stage, store_tag, release, platform)
            buildah.to_docker(store_tag, stage.tag)
        finally:
            buildah.remove(store_tag)
    size = docker("image", "inspect", "-f", "{{.Size}}", stage.tag).stdout.strip()
    print(
        f"pax images: built {stage.tag} {image_id} in {time.monotonic() - t0:.0f}s, "
        f"{int(size) / 1e6:.0f} MB",
        file=log,
    )
    return stage.tag


def verify(release: str, platform: str, log=sys.stderr, **options) -> dict:
    """Build the image twice, each staged and built from scratch: the same image ID, or
    ImageError naming what differs (pax.images.reproduce). The image then goes into the Docker
    engine under its tag, as `build` puts it, and its provenance is checked against the release
    record."""
    lock_path(release, platform)
    require_engine()
    stages = []

    def build_once(store_tag: str) -> str:
        with staged(release, platform, log=log, **options) as stage:
            stages.append(stage)
            return _build_in_store(stage, store_tag, release, platform)

    result = reproduce.verify(build_once, lambda t: buildah.to_docker(t, stages[0].tag), log=log)
    tag, revision = stages[0].tag, stages[0].args["REVISION"]
    record = catalog.load(lock_path(release, platform).parent)
    result["provenance"] = provenance.check_image(tag, record, platform, revision)
    print(f"pax images: {tag} reproduces: {result['image_id']}", file=log)
    return {"image": tag, **result}


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
