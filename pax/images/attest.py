"""Signed attestations of a published image, where cosign keeps them: a manifest under the tag
`sha256-<hex>.att` beside the image (OCI 1.1's referrers API would do as well, but Debian's
distribution 2.x registry has none), whose layers are DSSE envelopes
(application/vnd.dsse.envelope.v1+json) of in-toto Statements about the image's manifest digest:

  provenance  the image's own statement (pax.images.provenance), the image added as its first
              subject, so the signature covers the release, source, locks, base and recipe
  sbom        the image's CycloneDX SBOM as the predicate (predicateType https://cyclonedx.org/bom,
              as `cosign attest --type cyclonedx` writes it)

Each envelope is signed with the publisher's ed25519 key (PEM, PKCS#8: `openssl genpkey
-algorithm ed25519`) by securesystemslib, which also verifies it against the public key; the
tools venv has it (requirements/tools.in). No crypto is written here.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pax.images import provenance
from pax.images.engine import ImageError

PAYLOAD_TYPE = "application/vnd.in-toto+json"
ENVELOPE_TYPE = "application/vnd.dsse.envelope.v1+json"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
SBOM_PREDICATE = "https://cyclonedx.org/bom"
KINDS = {provenance.PREDICATE_TYPE: "provenance", SBOM_PREDICATE: "sbom"}
KEYGEN = (
    "openssl genpkey -algorithm ed25519 -out pax-signing.pem && "
    "openssl pkey -in pax-signing.pem -pubout -out pax-signing.pub.pem"
)


def tag(digest: str) -> str:
    """cosign's tag for the attestations of the manifest `digest`."""
    return digest.replace(":", "-") + ".att"


def _dsse():
    try:
        from cryptography.hazmat.primitives import serialization
        from securesystemslib.dsse import Envelope
        from securesystemslib.signer import CryptoSigner, SSlibKey
    except ImportError:
        raise ImageError(
            "signing and checking attestations need securesystemslib, which the tools venv has: "
            "run through ./noxw, or .tools/venv/bin/python -m pax.images"
        ) from None
    return serialization, Envelope, CryptoSigner, SSlibKey


def _read_key(path: Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise ImageError(f"--key {path}: {e.strerror}", usage=True) from None


def statements(name: str, digest: str, provenance_doc: dict, sbom_doc: dict) -> list[dict]:
    """The two statements about the image `name@digest`."""
    image = {"name": name, "digest": {"sha256": digest.removeprefix("sha256:")}}
    return [
        {**provenance_doc, "subject": [image, *provenance_doc.get("subject", [])]},
        {
            "_type": provenance.STATEMENT_TYPE,
            "subject": [image],
            "predicateType": SBOM_PREDICATE,
            "predicate": sbom_doc,
        },
    ]


def signer(key: Path):
    """A signer with the ed25519 private key at `key` (PEM); a usage error naming how to make
    one when it is not such a key."""
    serialization, _, CryptoSigner, _ = _dsse()
    try:
        return CryptoSigner(serialization.load_pem_private_key(_read_key(key), password=None))
    except (ValueError, TypeError) as e:
        raise ImageError(
            f"--key {key} is not an unencrypted ed25519 private key in PEM ({e}); make one with: "
            f"{KEYGEN}",
            usage=True,
        ) from None


def sign(statement: dict, key_signer) -> bytes:
    """The statement as a DSSE envelope signed by `key_signer` (`signer`)."""
    _, Envelope, _, _ = _dsse()
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    envelope = Envelope(payload=payload, payload_type=PAYLOAD_TYPE, signatures={})
    envelope.sign(key_signer)
    return json.dumps(envelope.to_dict(), sort_keys=True).encode()


def public_key(path: Path):
    """The public key at `path` (PEM) as securesystemslib verifies with it."""
    serialization, _, _, SSlibKey = _dsse()
    try:
        return SSlibKey.from_crypto(serialization.load_pem_public_key(_read_key(path)))
    except (ValueError, TypeError) as e:
        raise ImageError(f"--key {path} is not a public key in PEM ({e})", usage=True) from None


def open_envelope(body: bytes, key, kind: str) -> dict:
    """The statement inside a DSSE envelope, once its signature verifies with `key`."""
    _, Envelope, _, _ = _dsse()
    from securesystemslib.exceptions import VerificationError

    try:
        envelope = Envelope.from_dict(json.loads(body))
    except (ValueError, KeyError, TypeError) as e:
        raise ImageError(f"the {kind} attestation is not a DSSE envelope ({e})") from None
    if envelope.payload_type != PAYLOAD_TYPE:
        raise ImageError(f"the {kind} attestation's payload is {envelope.payload_type!r}")
    try:
        envelope.verify([key], 1)
    except VerificationError:
        raise ImageError(
            f"the {kind} attestation's signature does not verify with the given key (another "
            "key signed it, or its payload was changed after signing)"
        ) from None
    try:
        return json.loads(envelope.payload)
    except ValueError:
        raise ImageError(f"the {kind} attestation's payload is not JSON") from None


def manifest(envelopes: list[tuple[str, bytes]]) -> tuple[bytes, bytes]:
    """(config, manifest) bytes of the attestation image, layers in `envelopes`' order
    ((predicateType, envelope) pairs), in the shape cosign gives it."""
    digests = ["sha256:" + hashlib.sha256(body).hexdigest() for _, body in envelopes]
    config = json.dumps(
        {
            "architecture": "",
            "os": "",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": digests},
        },
        sort_keys=True,
    ).encode()
    layers = [
        {
            "mediaType": ENVELOPE_TYPE,
            "size": len(body),
            "digest": digest,
            "annotations": {"dev.cosignproject.cosign/signature": "", "predicateType": predicate},
        }
        for (predicate, body), digest in zip(envelopes, digests)
    ]
    doc = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {
            "mediaType": CONFIG_TYPE,
            "size": len(config),
            "digest": "sha256:" + hashlib.sha256(config).hexdigest(),
        },
        "layers": layers,
    }
    return config, json.dumps(doc, sort_keys=True).encode()


def attach(reg, repo: str, digest: str, envelopes: list[tuple[str, bytes]]) -> str:
    """Upload the envelopes and put their manifest under `sha256-<hex>.att`; its digest."""
    config, body = manifest(envelopes)
    for blob in (config, *(envelope for _, envelope in envelopes)):
        reg.put_blob(repo, blob)
    return reg.put_manifest(repo, tag(digest), body, MANIFEST_TYPE)


def fetch(reg, repo: str, digest: str) -> dict[str, bytes]:
    """The envelopes attached to `digest`, by kind ("provenance", "sbom"); ImageError when none
    are attached."""
    found = reg.manifest(repo, tag(digest))
    if found is None:
        raise ImageError(f"no attestation is attached to {repo}@{digest} (no tag {tag(digest)})")
    envelopes = {}
    for layer in json.loads(found[1]).get("layers", []):
        predicate = (layer.get("annotations") or {}).get("predicateType")
        if layer.get("mediaType") == ENVELOPE_TYPE and predicate in KINDS:
            envelopes[KINDS[predicate]] = reg.blob(repo, layer["digest"])
    return envelopes
