"""An image's build context: the recipe (the Dockerfiles for the platform under ROOT, joined into
one, and the in-image check with its lock reader), the lock, the wheels, the pax wheel, the env's
identity file, the SBOM and the provenance statement, all dated by the source commit; and the build
arguments that name them. Everything that decides the image's bytes is here. ROOT is this
checkout, or for a frozen release its own exported tree, where pax.images.stage runs this."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from pax import envinfo, lockfile, paths
from pax.errors import last_line
from pax.images import provenance
from pax.images.engine import LOCK_IN_IMAGE, ImageError
from pax.images.target import Target
from pax.paths import ROOT


@dataclasses.dataclass(frozen=True)
class Context:
    """A staged build: its folder, recipe and arguments, the date and the tag it builds."""

    path: Path
    dockerfile: Path
    args: dict[str, str]
    epoch: int
    tag: str


def lay_out(
    target: Target,
    tag: str,
    wheelhouse: Path,
    pax_wheel: Path,
    ctx: Path,
    base_id: str,
    builder_version: str,
    verify_hashes: bool = True,
    log=sys.stderr,
) -> Context:
    """Write the context into `ctx` (a new folder) and name it in the build arguments."""
    copy_inputs(target, wheelhouse, pax_wheel, ctx)
    sbom = ctx / "sbom.cdx.json"
    sbom_sha = write_sbom(target, wheelhouse, pax_wheel, sbom, verify_hashes)
    statement = provenance.statement(
        target.release,
        target.platform,
        target.source.revision,
        base_id,
        recipe=recipe_files(target.platform),
        subjects={
            f"releases/{target.version}/{target.platform}.txt": target.lock,
            f"dist/{pax_wheel.name}": pax_wheel,
            "sbom.cdx.json": sbom,
        },
        command=build_command(target),
        builder_version=builder_version,
        python=target.release.image_python,
    )
    provenance_sha = provenance.write(statement, ctx / provenance.FILENAME)
    args = build_args(target, tag, base_id, sbom_sha, provenance_sha)
    date_context(ctx, target.source.epoch)
    what = "this checkout" if target.dev else "source"
    print(
        f"pax images: build {tag} (base {base_id[7:19]}, lock sha256 "
        f"{target.lock_sha256[:12]}, pax of {what} {target.source.revision[:12]}, recipe "
        f"{args['RECIPE_SHA256'][:12]})",
        file=log,
    )
    return Context(ctx, ctx / f"Dockerfile.{target.platform}", args, target.source.epoch, tag)


def copy_inputs(target: Target, wheelhouse: Path, pax_wheel: Path, ctx: Path) -> None:
    """The recipe, the lock, the wheels (hard links when possible), the pax wheel and the env's
    identity file, into ctx."""
    release, platform = target.version, target.platform
    (ctx / "releases" / release).mkdir(parents=True)
    shutil.copy2(target.lock, ctx / "releases" / release / f"{platform}.txt")
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
    (ctx / envinfo.IDENTITY_FILE).write_text(image_identity(target).to_json())


def image_identity(target: Target) -> envinfo.Identity:
    """The identity file of the image's /opt/venv (the lock sits at LOCK_IN_IMAGE there)."""
    return envinfo.Identity(
        release=target.version,
        platform=target.platform,
        lockfile=LOCK_IN_IMAGE,
        lock_sha256=target.lock_sha256,
        python=target.release.image_python,
        locked=lockfile.versions(lockfile.parse_lockfile(target.lock)),
        source_revision=target.source.revision,
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
    target: Target, wheelhouse: Path, pax_wheel: Path, out: Path, verify_hashes: bool = True
) -> str:
    """Generate the SBOM into out (pax.images.sbom, in an interpreter that has the library);
    returns its sha256."""
    r = subprocess.run(
        [
            _sbom_python(),
            "-m",
            "pax.images.sbom",
            str(target.lock),
            str(wheelhouse),
            str(pax_wheel),
            f"--release={target.version}",
            f"--platform={target.platform}",
            f"--epoch={target.source.epoch}",
            f"--out={out}",
            f"--python={target.release.image_python}",
            *(
                f"--left-out={name}"
                for name in left_out(target.platform, lockfile.parse_lockfile(target.lock))
            ),
            *([] if verify_hashes else ["--no-verify-hashes"]),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if r.returncode != 0:
        msg = last_line(r.stderr, r.stdout).removeprefix("pax images: error: ")
        if msg.startswith("wheel hash mismatch"):
            raise ImageError(f"{msg}; no image tagged")
        raise ImageError(f"writing the SBOM failed: {msg}")
    digest = lockfile.sha256_file(out)
    if r.stdout.strip() != digest:
        raise ImageError(f"the SBOM at {out} changed while it was written")
    return digest


def build_command(target: Target) -> list[str]:
    """The command the provenance names (the same for every build of the target)."""
    dev = ["--dev"] if target.dev else []
    return ["./noxw", "-s", "build", "--", target.version, target.platform, *dev]


def build_args(
    target: Target, tag: str, base_id: str, sbom_sha: str, provenance_sha: str
) -> dict[str, str]:
    """The recipe's build arguments: what it installs, the digests its labels carry, its date."""
    epoch = target.source.epoch
    return {
        "PLATFORM": target.platform,
        "RELEASE": target.version,
        "BASE_IMAGE": base_id,
        "PYTHON": target.release.image_python,
        "LOCK_SHA256": target.lock_sha256,
        "SBOM_SHA256": sbom_sha,
        "PROVENANCE_SHA256": provenance_sha,
        "REVISION": target.source.revision,
        "RECIPE_SHA256": recipe_sha256(target.platform),
        "VERSION": target.version + target.suffix,  # 1.4.0, or 1.6.0-dev.<sha>
        "IMAGE": tag,
        "SOURCE_DATE_EPOCH": str(epoch),
        "CREATED": datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        ),
    }


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


def left_out(platform: str, pins: Iterable[str]) -> list[str]:
    """The lock's packages the recipe removes from the image (`verify_image_env.py --leave-out
    NAME...` in its Dockerfiles, of which it removes those the lock `pins`), so the SBOM lists
    what the image holds. The recipe is their one home: it is where they are removed, with the
    reason."""
    recipe = "\n".join((ROOT / name).read_text() for name in dockerfiles(platform))
    return sorted(
        name
        for names in re.findall(r"verify_image_env\.py --leave-out ([^\n&;|]+)", recipe)
        for name in names.split()
        if name in set(pins)
    )


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
        digest.update(f"{name}\0{lockfile.sha256_file(path)}\n".encode())
    return digest.hexdigest()
