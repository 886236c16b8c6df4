"""Publishing, as a registry client: push under a unique candidate tag, read its digest from the
registry (checked against the manifest bytes), pull back by that digest and verify it (labels,
the environment against its lock, the SBOM and the provenance statement against their labels,
the lock and the release record), with a key attach the signed provenance and SBOM to that
digest (pax.images.attest), push the base beside it (pax-base:<its ID's hex>, so it can be
pulled back once the Debian mirror has moved on), and only then put the same manifest bytes under
<release>-<platform> and latest-<platform> (a dev image: under its own <release>-<platform>-dev.<sha>
alone)."""

from __future__ import annotations

import json
import re
import secrets
import sys
from pathlib import Path
from typing import Optional

from pax.errors import last_line
from pax.images import attest, frozen, provenance
from pax.images.engine import (
    IMAGE_REPO,
    ImageError,
    docker,
    image_exists,
    label,
    read_labelled_file,
    require_image,
    verify_in_image,
)
from pax.images.registry import Registry, ca_bundle, credentials
from pax.images.sbom import SBOM_IN_IMAGE, SBOM_LABEL
from pax.images.sbom import check_image as check_sbom
from pax.images.target import Target

REVISION_LABEL = "org.opencontainers.image.revision"
VERSION_LABEL = "org.opencontainers.image.version"


def client(registry: str, ca: Optional[Path] = None) -> Registry:
    """The registry as publish talks to it: CA bundle and Docker-config credentials chosen."""
    return Registry(registry, ca=ca_bundle(registry, ca), creds=credentials(registry))


def registry_digest(registry: str, repo: str, tag: str, ca: Optional[Path] = None):
    """The manifest digest the registry serves for repo:tag (None if it has none)."""
    return client(registry, ca).digest(repo, tag)


def _labels(image: str) -> dict:
    out = docker("image", "inspect", "-f", "{{json .Config.Labels}}", image).stdout
    return json.loads(out) or {}


def _repo_digests(image: str) -> list:
    out = docker("image", "inspect", "-f", "{{json .RepoDigests}}", image, check=False).stdout
    return json.loads(out or "null") or []


def check_labels(image: str, source: str, target: Target) -> dict:
    """The pulled image's labels name this release (a dev build's version is
    <release>-dev.<sha>), platform and lock, and the version and revision of the image that was
    pushed."""
    labels, pushed = _labels(image), _labels(source)
    release = target.version
    revision, version = pushed.get(REVISION_LABEL, ""), pushed.get(VERSION_LABEL, "")
    if version != release and not version.startswith(f"{release}-dev."):
        version = release
    want = {
        VERSION_LABEL: version,
        "io.pax.platform": target.platform,
        "io.pax.lock.sha256": target.lock_sha256,
        REVISION_LABEL: revision,
    }
    wrong = [
        f"{k}={labels.get(k, '(none)')!r}, want {v!r}"
        for k, v in want.items()
        if labels.get(k) != v
    ]
    if wrong or not revision:
        raise ImageError(f"labels of {image}: {'; '.join(wrong) or 'no revision label'}")
    return want


def _push(ref: str, registry: str) -> None:
    r = docker("push", ref, check=False)
    if r.returncode != 0:
        why = last_line(r.stderr, r.stdout, default=f"exit {r.returncode}")
        raise ImageError(f"registry {registry} refused the push of {ref}: {why}")


def _verify(by_digest: str, image: str, target: Target, revision: Optional[str]) -> tuple:
    """Pull back by digest and check it; `revision`: a dev image's source commit, None for a
    release image (checked against the release's recorded source)."""
    r = docker("pull", by_digest, check=False)
    if r.returncode != 0:
        raise ImageError(f"pull of {by_digest} failed: {(r.stderr or r.stdout).strip()}")
    try:
        check_labels(by_digest, image, target)
        ids = [docker("image", "inspect", "-f", "{{.Id}}", i).stdout for i in (by_digest, image)]
        if ids[0] != ids[1]:
            raise ImageError(f"{by_digest} pulled back a different image than {image}")
        report = verify_in_image(by_digest)
        # The bill of materials, as pulled: its sha256 is the label's, its content the lock's;
        # the provenance statement agrees with the release record (a dev image's source is the
        # checkout commit its label names).
        bom = check_sbom(by_digest, target.lock, target.version, target.platform)
        origin = provenance.check_image(by_digest, target.release, target.platform, revision)
        return report, bom, origin
    finally:
        docker("rmi", by_digest, check=False)


def _push_base(reg: Registry, registry: str, image_id: str) -> str:
    """The image's base (its label io.pax.base.id) beside it, REGISTRY/pax-base:<the ID's hex>,
    so the recorded base can be pulled back after the mirror has moved on; its reference by the
    registry's digest, whose config is that ID."""
    base_id = label(image_id, "io.pax.base.id")
    if not image_exists(base_id):
        raise ImageError(
            f"the image's base {base_id} is not in the Docker engine; bring it back with "
            "ci/base-image.sh --load FILE, then publish again"
        )
    ref = frozen.base_ref(registry, base_id)
    repo, tag = ref.removeprefix(f"{registry}/").split(":")
    docker("tag", base_id, ref)
    try:
        _push(ref, registry)
    finally:
        docker("rmi", ref, check=False)
    served = reg.manifest(repo, tag)
    if served is None or json.loads(served[1]).get("config", {}).get("digest") != base_id:
        raise ImageError(f"registry {registry} does not serve the base {base_id} at {ref}")
    return f"{registry}/{repo}@{served[0]}"


def _move_tags(reg: Registry, tags: list[str], body: bytes, media: str, before: dict) -> None:
    """Put the verified manifest under each tag; if one is refused, put back what the earlier
    ones served, so a failure leaves every tag where it was."""
    moved = []
    try:
        for tag in tags:
            reg.put_manifest(IMAGE_REPO, tag, body, media)
            moved.append(tag)
    except ImageError as e:
        kept = []
        for tag in moved:
            if before[tag]:
                reg.put_manifest(IMAGE_REPO, tag, before[tag][1], before[tag][2])
            else:
                kept.append(tag)  # no API removes a tag alone on every registry
        note = f"; {', '.join(kept)} had no manifest before and now names the verified one"
        raise ImageError(f"{e}{note if kept else ''}") from None


def _attest(reg: Registry, name: str, digest: str, image_id: str, key_signer) -> dict:
    """Sign the image's provenance and SBOM (as the image holds them, checked against its
    labels) about `digest`, and attach them to it in the registry."""
    docs = [
        json.loads(read_labelled_file(image_id, path, name_)[0])
        for path, name_ in ((provenance.IN_IMAGE, provenance.LABEL), (SBOM_IN_IMAGE, SBOM_LABEL))
    ]
    statements = attest.statements(name, digest, *docs)
    envelopes = [(s["predicateType"], attest.sign(s, key_signer)) for s in statements]
    return {
        "tag": attest.tag(digest),
        "digest": attest.attach(reg, IMAGE_REPO, digest, envelopes),
        "key": key_signer.public_key.keyid,
    }


def _delete_candidate(reg: Registry, tag: str) -> bool:
    try:
        return reg.delete_tag(IMAGE_REPO, tag)
    except ImageError:  # never hides why publish stopped; the candidate tag names no release
        return False


def publish(
    target: Target,
    registry: str,
    image: Optional[str] = None,
    ca: Optional[Path] = None,
    key: Optional[Path] = None,
    log=sys.stderr,
) -> dict:
    """Push the image (default target.tag) under a candidate tag, verify what the registry
    serves, with `key` (an ed25519 private key, PEM) attach its signed attestations, then move
    <release>-<platform> and latest-<platform> to it."""
    release, platform = target.version, target.platform
    key_signer = attest.signer(key) if key else None
    if not re.fullmatch(r"[A-Za-z0-9.-]+(:\d+)?", registry or ""):
        raise ImageError(
            f"bad --registry {registry!r}: write HOST:PORT, e.g. 127.0.0.1:5000", usage=True
        )
    reg = client(registry, ca)
    image = require_image(image or target.tag, release, platform)
    reg.check_access()
    # The image as it is now, by ID: a tag moved meanwhile cannot change what is pushed and checked.
    image_id = docker("image", "inspect", "-f", "{{.Id}}", image).stdout.strip()
    # A dev image (this checkout on the release's locks) goes under its own tag only: the
    # release's tag and latest name release images.
    version = label(image_id, VERSION_LABEL)
    dev = version.startswith(f"{release}-dev.")
    revision = label(image_id, "io.pax.source.revision") if dev else None
    tags = (
        [f"{release}-{platform}{version.removeprefix(release)}"]
        if dev
        else [f"{release}-{platform}", f"latest-{platform}"]
    )
    before = {tag: reg.manifest(IMAGE_REPO, tag) for tag in tags}
    candidate = f"{release}-{platform}-candidate-{secrets.token_hex(6)}"
    remote = f"{registry}/{IMAGE_REPO}"
    kept_digests = _repo_digests(image_id)
    docker("tag", image_id, f"{remote}:{candidate}")
    try:
        _push(f"{remote}:{candidate}", registry)
        served = reg.manifest(IMAGE_REPO, candidate)
        if served is None:
            raise ImageError(f"registry {registry} has no {IMAGE_REPO}:{candidate} after the push")
        digest, body, media = served
        report, bom, origin = _verify(f"{remote}@{digest}", image_id, target, revision)
        base = _push_base(reg, registry, image_id)
        signed = key_signer and _attest(reg, remote, digest, image_id, key_signer)
        _move_tags(reg, tags, body, media, before)
    finally:
        docker("rmi", f"{remote}:{candidate}", check=False)
        # The push left a repo digest on the local image; drop it unless it was there before.
        for ref in set(_repo_digests(image_id)) - set(kept_digests):
            if ref.startswith(f"{remote}@"):
                docker("rmi", ref, check=False)
        deleted = _delete_candidate(reg, candidate)
    for tag in tags:
        if reg.digest(IMAGE_REPO, tag) != digest:
            raise ImageError(f"registry {registry} does not serve {digest} for {IMAGE_REPO}:{tag}")
    refs = [f"{remote}:{tag}" for tag in tags]
    print(f"pax images: published {' and '.join(refs)} at {digest}", file=log)
    return {
        "digest": digest,
        "refs": refs,
        "before": {tag: found[0] if found else None for tag, found in before.items()},
        "candidate": {"tag": candidate, "deleted": deleted},
        "verify": report,
        "sbom": bom,
        "provenance": origin,
        "base": base,
        "attestations": signed or None,
    }
