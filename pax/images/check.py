"""`python -m pax.images check REGISTRY/pax:RELEASE-PLATFORM --key pub.pem` (`./noxw -s check`):
is the image a registry serves the release's, judged from the registry alone over HTTPS, with no
Docker engine and nothing pulled but the manifest and the attestations.

In order, stopping at the first that fails: the tag's manifest (digest checked against its
bytes); the signed provenance and SBOM attestations attached to that digest (pax.images.attest),
each verified with the public key; each statement's subject is that digest; the provenance names
this release and platform, the release's source revision, lock sha256s and recorded base ID;
the SBOM's components are the release's lock; the image ID (the manifest's config digest) is the
one release.toml's [images] records. Only GET requests: the registry is left as it was.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Optional

from pax.images import attest, provenance, record, sbom
from pax.images.engine import ImageError
from pax.images.publish import client
from pax.images.wheelhouse import lock_path
from pax.releases import catalog

_REF = re.compile(r"(?P<registry>[A-Za-z0-9.-]+(?::\d+)?)/(?P<repo>[a-z0-9._/-]+):(?P<tag>[\w.-]+)")


def parse_ref(ref: str, release: Optional[str] = None) -> tuple[str, str, str, str, str]:
    """(registry, repo, tag, release, platform) of REGISTRY/REPO:RELEASE-PLATFORM; a tag such as
    latest-tpu takes its release from `release`."""
    m = _REF.fullmatch(ref or "")
    if not m:
        raise ImageError(
            f"bad image {ref!r}: write REGISTRY/REPO:TAG, e.g. 127.0.0.1:5000/pax:1.7.0-tpu",
            usage=True,
        )
    version, _, platform = m["tag"].rpartition("-")
    if platform not in catalog.IMAGE_PLATFORMS or not (release or version):
        raise ImageError(
            f"tag {m['tag']!r} names no RELEASE-PLATFORM (platforms "
            f"{', '.join(catalog.IMAGE_PLATFORMS)}); name the release with --release",
            usage=True,
        )
    if release is None and not catalog.looks_like_release(version):
        raise ImageError(f"tag {m['tag']!r}: name its release with --release X.Y.Z", usage=True)
    return m["registry"], m["repo"], m["tag"], release or version, platform


def check(
    ref: str,
    key: Path,
    release: Optional[str] = None,
    ca: Optional[Path] = None,
    log=sys.stderr,
) -> dict:
    registry, repo, tag, version, platform = parse_ref(ref, release)
    try:
        record_ = catalog.resolve(version)
    except catalog.UnknownRelease as e:
        raise ImageError(str(e), usage=True) from None
    lock = lock_path(record_.version, platform)
    public = attest.public_key(key)
    reg = client(registry, ca)
    reg.check_access()
    found = reg.manifest(repo, tag)
    if found is None:
        raise ImageError(f"registry {registry} has no {repo}:{tag}")
    digest, body, _ = found
    config = json.loads(body).get("config", {}).get("digest")
    if not config:
        raise ImageError(f"{ref} is an image index, not one image: check one platform's tag")
    fail = f"{ref} ({digest[:19]}):"
    envelopes = attest.fetch(reg, repo, digest)
    statements = {}
    for kind in ("provenance", "sbom"):
        if kind not in envelopes:
            raise ImageError(f"{fail} no signed {kind} attestation is attached")
        statements[kind] = doc = attest.open_envelope(envelopes[kind], public, kind)
        subject = (doc.get("subject") or [{}])[0].get("digest", {}).get("sha256")
        if f"sha256:{subject}" != digest:
            raise ImageError(
                f"{fail} the {kind} attestation is about sha256:{str(subject)[:12]}, not this image"
            )
    images = record.recorded(record_)
    try:
        problems = provenance.check(statements["provenance"], record_, platform)
        base = provenance.base_id(statements["provenance"])
    except (KeyError, TypeError, AttributeError):
        raise ImageError(f"{fail} the provenance attestation is not a pax build's") from None
    if images.get("base_id") and base != images["base_id"]:
        problems.append(f"base {base[:19]}, the release records {images['base_id'][:19]}")
    if problems:
        raise ImageError(
            f"{fail} the provenance disagrees with release {record_.version}'s record: "
            + "; ".join(problems)
        )
    if statements["sbom"].get("predicateType") != attest.SBOM_PREDICATE:
        raise ImageError(f"{fail} the sbom attestation's predicate is not a CycloneDX BOM")
    try:
        bom = sbom.check(
            json.dumps(statements["sbom"].get("predicate")), lock, record_.version, platform
        )
    except ImageError as e:
        raise ImageError(f"{fail} {e}") from None
    if platform not in images:
        raise ImageError(
            f"{fail} release {record_.version} records no {platform} image ID (./noxw -s release "
            f"-- {record_.version} --record-images)"
        )
    if config != images[platform]:
        raise ImageError(
            f"{fail} image ID {config[:19]}, release {record_.version} records "
            f"{images[platform][:19]}"
        )
    print(
        f"pax images: {ref} is release {record_.version}'s {platform} image {config[:19]}: "
        f"signed provenance and SBOM verified",
        file=log,
    )
    return {
        "image": ref,
        "digest": digest,
        "image_id": config,
        "source": statements["provenance"]["predicate"]["buildDefinition"]["externalParameters"][
            "source"
        ]["digest"]["gitCommit"],
        "base": base,
        "sbom": bom,
    }
