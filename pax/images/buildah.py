"""The image builder: Debian's buildah, so that the same inputs give the same image ID.

Docker's classic builder dates the config, the history and every file it writes with the wall
clock. buildah is run so nothing varies but the inputs: `--timestamp` dates the config and every
file in the new layers at the release's source date, `--omit-history` drops per-step records,
`--layers=false` keeps no step cache (each build is cold), one storage driver (vfs: overlay's
layer diffs differ for the same steps) in a store of the project's own, and each step runs in
runc with no network. The result is pushed into the Docker engine, where smoke and publish find
it under the same image ID (the config's bytes travel unchanged).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from pax.errors import last_line
from pax.images.engine import ImageError

# Shared with ci/base-image.sh, which builds the base image into the same store.
ROOT = Path(os.environ.get("PAX_BUILDAH_ROOT", "/var/tmp/pax-buildah"))
INSTALL_HINT = "ci/image-tools.sh installs Debian's buildah"


def buildah(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """One buildah call on the project's store; one-line ImageError on failure."""
    if shutil.which("buildah") is None:
        raise ImageError(f"no buildah on PATH; {INSTALL_HINT}")
    command = ["buildah", "--root", str(ROOT), "--runroot", str(ROOT / "run")]
    r = subprocess.run([*command, "--storage-driver", "vfs", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise ImageError(
            f"buildah {args[0]} failed: {last_line(r.stderr, r.stdout, default=str(r.returncode))}"
        )
    return r


def image_id(ref: str) -> str | None:
    """The sha256 image ID of `ref` in the store, or None when the store lacks it."""
    r = buildah("inspect", "--type", "image", "--format", "{{.FromImageID}}", ref, check=False)
    return f"sha256:{r.stdout.strip()}" if r.returncode == 0 and r.stdout.strip() else None


def base_id(base_image: str) -> str:
    """The base image pinned by ID: the store's copy (ci/base-image.sh builds it there), else
    copied from the Docker engine (a pulled public base)."""
    found = image_id(base_image)
    if found is None:
        buildah("pull", "--quiet", f"docker-daemon:{base_image}")
        found = image_id(f"docker-daemon:{base_image}") or image_id(base_image)
    if found is None:
        raise ImageError(f"base image {base_image} is in neither buildah's store nor Docker's")
    return found


def pinned(base_image: str) -> tuple[str, str]:
    """What a build runs on and with: (the base's image ID, buildah's version)."""
    return base_id(base_image), version()


def build(
    context: Path, dockerfile: Path, tag: str, build_args: dict[str, str], epoch: int
) -> tuple[str, str]:
    """Build `dockerfile` in `context` as `tag` in the store; (image ID, the build's output)."""
    args = ["bud", "--layers=false", "--pull=never", "--isolation", "oci", "--network", "none"]
    args += ["--timestamp", str(epoch), "--omit-history", "-f", str(dockerfile), "-t", tag]
    for name, value in build_args.items():
        args += ["--build-arg", f"{name}={value}"]
    r = buildah(*args, str(context), check=False)
    out = r.stdout + r.stderr
    if r.returncode != 0:
        raise BuildFailed(out)
    built = image_id(tag)
    if built is None:
        raise ImageError(f"buildah reported success but {tag} is not in its store")
    return built, out


class BuildFailed(ImageError):
    """The build's steps failed; `output` is what they printed."""

    def __init__(self, output: str):
        super().__init__("buildah bud failed")
        self.output = output


def build_into_docker(
    context: Path,
    dockerfile: Path,
    tag: str,
    build_args: dict[str, str],
    epoch: int,
    docker_tag: str,
) -> str:
    """`build` as `tag`, then the image copied into the Docker engine as `docker_tag`; the store
    keeps nothing. The image ID."""
    try:
        image_id, _ = build(context, dockerfile, tag, build_args, epoch)
        to_docker(tag, docker_tag)
        return image_id
    finally:
        remove(tag)


def to_docker(tag: str, docker_tag: str) -> None:
    """Copy a built image into the Docker engine (same image ID) under `docker_tag`."""
    buildah("push", "--quiet", tag, f"docker-daemon:{docker_tag}")


def save(tag: str, dest: Path) -> Path:
    """The image as an OCI layout directory (its layers as tar blobs), for comparing builds."""
    buildah("push", "--quiet", "--disable-compression", tag, f"oci:{dest}")
    return dest


def remove(*tags: str) -> None:
    buildah("rmi", "--force", *tags, check=False)


def version() -> str:
    """buildah's version, e.g. "1.28.2" (the provenance's builder.version)."""
    r = buildah("version", "--json")
    return json.loads(r.stdout)["version"]
