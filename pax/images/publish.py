"""Publishing: push to a registry, move latest-<platform>, pull back by digest, re-verify (the
environment against its lock, the SBOM against its label and the lock)."""

from __future__ import annotations

import re
import sys
import urllib.error
import urllib.request
from typing import Optional

from pax.images.engine import (
    IMAGE_REPO,
    ImageError,
    docker,
    image_exists,
    image_ref,
    require_engine,
    verify_in_image,
)
from pax.images.sbom import check_image as check_sbom
from pax.images.wheelhouse import lock_path


def _registry_answers(registry: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{registry}/v2/", timeout=5) as r:
            return r.status == 200
    except urllib.error.HTTPError as e:
        return e.code == 401  # answers, wants credentials
    except (urllib.error.URLError, OSError, ValueError):
        return False


def registry_digest(registry: str, repo: str, tag: str) -> Optional[str]:
    """The manifest digest the registry serves for repo:tag (None if it has none)."""
    req = urllib.request.Request(
        f"http://{registry}/v2/{repo}/manifests/{tag}",
        method="HEAD",
        headers={
            "Accept": "application/vnd.docker.distribution.manifest.v2+json, "
            "application/vnd.oci.image.manifest.v1+json"
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.headers.get("Docker-Content-Digest")
    except (urllib.error.URLError, OSError):
        return None


def _push(ref: str, registry: str) -> str:
    r = docker("push", ref, check=False)
    out = r.stdout + r.stderr
    if r.returncode != 0:
        lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
        raise ImageError(
            f"registry {registry} refused the push of {ref}: "
            f"{lines[-1] if lines else 'exit ' + str(r.returncode)}"
        )
    m = re.search(r"digest: (sha256:[0-9a-f]{64})", out)
    if not m:
        raise ImageError(f"docker push {ref} printed no digest")
    return m.group(1)


def publish(
    release: str, platform: str, registry: str, image: Optional[str] = None, log=sys.stderr
) -> dict:
    """Push pax:<release>-<platform> and move latest-<platform>; pull back by digest; verify."""
    lock = lock_path(release, platform)
    if not re.fullmatch(r"[A-Za-z0-9.-]+(:\d+)?", registry or ""):
        raise ImageError(
            f"bad --registry {registry!r}: write HOST:PORT, e.g. 127.0.0.1:5000", usage=True
        )
    require_engine()
    image = image or image_ref(release, platform)
    if not image_exists(image):
        raise ImageError(
            f"image {image} not found; build it with ./noxw -s build -- {release} {platform}"
        )
    if not _registry_answers(registry):
        raise ImageError(
            f"registry {registry} does not answer at http://{registry}/v2/; start one "
            f"with ci/registry.sh start"
        )
    remote = f"{registry}/{IMAGE_REPO}"
    versioned, latest = f"{remote}:{release}-{platform}", f"{remote}:latest-{platform}"
    docker("tag", image, versioned)
    docker("tag", image, latest)
    try:
        digest = _push(versioned, registry)
        latest_digest = _push(latest, registry)
    finally:
        docker("rmi", versioned, latest, check=False)
    if latest_digest != digest:
        raise ImageError(f"latest-{platform} points at {latest_digest}, not {digest}")
    for tag in (f"{release}-{platform}", f"latest-{platform}"):
        served = registry_digest(registry, IMAGE_REPO, tag)
        if served != digest:
            raise ImageError(
                f"registry {registry} serves {served} for {IMAGE_REPO}:{tag}, pushed {digest}"
            )
    by_digest = f"{remote}@{digest}"
    r = docker("pull", by_digest, check=False)
    if r.returncode != 0:
        raise ImageError(f"pull of {by_digest} failed: {(r.stderr or r.stdout).strip()}")
    try:
        if (
            docker("image", "inspect", "-f", "{{.Id}}", by_digest).stdout
            != docker("image", "inspect", "-f", "{{.Id}}", image).stdout
        ):
            raise ImageError(f"{by_digest} pulled back a different image than {image}")
        report = verify_in_image(by_digest)
        # The bill of materials, as pulled: its sha256 is the label's, its content the lock's.
        bom = check_sbom(by_digest, lock, release, platform)
    finally:
        docker("rmi", by_digest, check=False)
    print(f"pax images: published {versioned} and {latest} at {digest}", file=log)
    return {"digest": digest, "refs": [versioned, latest], "verify": report, "sbom": bom}
