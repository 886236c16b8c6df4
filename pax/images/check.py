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
from typing import NamedTuple, Optional

from pax.images import attest, frozen, provenance, record, sbom
from pax.images.engine import ImageError
from pax.images.publish import client
from pax.images.registry import Registry
from pax.images.target import Target
from pax.releases import catalog

_REF = re.compile(r"(?P<registry>[A-Za-z0-9.-]+(?::\d+)?)/(?P<repo>[a-z0-9._/-]+):(?P<tag>[\w.-]+)")


class Ref(NamedTuple):
    """REGISTRY/REPO:TAG, with the release and platform the tag names (or --release gave)."""

    registry: str
    repo: str
    tag: str
    release: str
    platform: str

    def __str__(self) -> str:
        return f"{self.registry}/{self.repo}:{self.tag}"


def parse_ref(ref: str, release: Optional[str] = None) -> Ref:
    """The parts of REGISTRY/REPO:RELEASE-PLATFORM; a tag such as latest-tpu takes its release
    from `release`."""
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
    return Ref(m["registry"], m["repo"], m["tag"], release or version, platform)


def check(ref: Ref, target: Target, key: Path, ca: Optional[Path] = None, log=sys.stderr) -> dict:
    """The image `ref` serves is `target`'s release image, judged from the registry alone."""
    public = attest.public_key(key)
    reg = client(ref.registry, ca)
    reg.check_access()
    digest, config = _manifest(reg, ref)
    fail = f"{ref} ({digest[:19]}):"
    statements = _attestations(reg, ref, digest, public, fail)
    images = record.recorded(target.release)
    base = _check_provenance(statements["provenance"], target, images, fail)
    bom = _check_sbom(statements["sbom"], target, fail)
    _check_image_id(config, target, images, fail)
    kept = _base_kept(reg, ref, base)
    print(
        f"pax images: {ref} is release {target.version}'s {target.platform} image "
        f"{config[:19]}: signed provenance and SBOM verified; its base "
        f"{f'is kept at {kept}' if kept else 'is not in this registry'}",
        file=log,
    )
    return {
        "image": str(ref),
        "digest": digest,
        "image_id": config,
        "source": statements["provenance"]["predicate"]["buildDefinition"]["externalParameters"][
            "source"
        ]["digest"]["gitCommit"],
        "base": base,
        "base_kept": kept,
        "sbom": bom,
    }


def _base_kept(reg: Registry, ref: Ref, base: str) -> Optional[str]:
    """Where the registry keeps the image's base (publish pushes it beside the image), by
    digest, when what it serves there has the base's ID; else None."""
    repo_tag = frozen.base_ref(ref.registry, base).removeprefix(f"{ref.registry}/")
    repo, tag = repo_tag.split(":")
    found = reg.manifest(repo, tag)
    if found is None or json.loads(found[1]).get("config", {}).get("digest") != base:
        return None
    return f"{ref.registry}/{repo}@{found[0]}"


def _manifest(reg: Registry, ref: Ref) -> tuple[str, str]:
    """(the tag's manifest digest, its image ID: the config digest)."""
    found = reg.manifest(ref.repo, ref.tag)
    if found is None:
        raise ImageError(f"registry {ref.registry} has no {ref.repo}:{ref.tag}")
    digest, body, _ = found
    config = json.loads(body).get("config", {}).get("digest")
    if not config:
        raise ImageError(f"{ref} is an image index, not one image: check one platform's tag")
    return digest, config


def _attestations(reg: Registry, ref: Ref, digest: str, public, fail: str) -> dict:
    """{"provenance": statement, "sbom": statement}: attached to the digest, each verified with
    the public key and about this image."""
    envelopes = attest.fetch(reg, ref.repo, digest)
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
    return statements


def _check_provenance(statement: dict, target: Target, images: dict, fail: str) -> str:
    """The provenance against the release record (and its recorded base); the base it names."""
    try:
        problems = provenance.check(statement, target.release, target.platform)
        base = provenance.base_id(statement)
    except (KeyError, TypeError, AttributeError):
        raise ImageError(f"{fail} the provenance attestation is not a pax build's") from None
    if images.get("base_id") and base != images["base_id"]:
        problems.append(f"base {base[:19]}, the release records {images['base_id'][:19]}")
    if problems:
        raise ImageError(
            f"{fail} the provenance disagrees with release {target.version}'s record: "
            + "; ".join(problems)
        )
    return base


def _check_sbom(statement: dict, target: Target, fail: str) -> dict:
    if statement.get("predicateType") != attest.SBOM_PREDICATE:
        raise ImageError(f"{fail} the sbom attestation's predicate is not a CycloneDX BOM")
    try:
        text = json.dumps(statement.get("predicate"))
        return sbom.check(text, target.lock, target.version, target.platform)
    except ImageError as e:
        raise ImageError(f"{fail} {e}") from None


def _check_image_id(config: str, target: Target, images: dict, fail: str) -> None:
    version, platform = target.version, target.platform
    if platform not in images:
        raise ImageError(
            f"{fail} release {version} records no {platform} image ID (./noxw -s release "
            f"-- {version} --record-images)"
        )
    if config != images[platform]:
        raise ImageError(
            f"{fail} image ID {config[:19]}, release {version} records {images[platform][:19]}"
        )
