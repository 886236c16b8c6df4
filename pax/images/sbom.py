"""The image's bill of materials: CycloneDX 1.6 JSON, generated from the release lock.

One component per lock pin the image holds (name, version, purl, the SHA-256 of the very wheel
the image installs, which the lock lists, and the licenses the wheel's metadata declares), one for
the pax wheel, and the dependency graph from the wheels' Requires-Dist; the image itself is the
BOM's subject, whose `pax:left_out` property names the pins its recipe removes. Generated on the
host at build time with cyclonedx-python-lib (the tools venv has it; `python -m
pax.images.sbom`), copied into the image at SBOM_IN_IMAGE, and its sha256 set as the image label
SBOM_LABEL. The same inputs give the same bytes (serial number and timestamp come
from the lock, the pax wheel and SOURCE_DATE_EPOCH), so an unchanged rebuild keeps its label.

`check` (stdlib only) is what publish runs on the SBOM read back from a pulled image.
"""

from __future__ import annotations

import argparse
import datetime
import email.parser
import hashlib
import json
import sys
import uuid
import zipfile
from pathlib import Path

from pax import lockfile
from pax.errors import report
from pax.images.engine import ImageError, read_labelled_file
from pax.releases import catalog

SBOM_IN_IMAGE = "/opt/pax/sbom.cdx.json"
SBOM_LABEL = "io.pax.sbom.sha256"
SPEC_VERSION = "1.6"


def _wheel_metadata(wheel: Path):
    """The wheel's METADATA (email-header format: Name, Version, License*, Requires-Dist)."""
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if len(names) != 1:
            raise ImageError(f"{wheel.name}: expected one .dist-info/METADATA, found {len(names)}")
        return email.parser.BytesHeaderParser().parsebytes(z.read(names[0]))


def _licenses(meta, factory, declared):
    """What the wheel declares, best first: a PEP 639 License-Expression; a one-line License
    field (longer ones hold the license's whole text, which names nothing); the trove
    classifiers. cyclonedx-python-lib decides SPDX id vs expression vs plain name."""
    expression = (meta.get("License-Expression") or "").strip()
    if expression:
        return [factory.make_from_string(expression, license_acknowledgement=declared)]
    text = (meta.get("License") or "").strip()
    if text and "\n" not in text and len(text) <= 100 and text.upper() not in ("UNKNOWN", ""):
        return [factory.make_from_string(text, license_acknowledgement=declared)]
    return [
        factory.make_with_name(c.split(" :: ")[-1], acknowledgement=declared)
        for c in meta.get_all("Classifier") or []
        if c.startswith("License :: ") and c.count(" :: ") >= 2
    ]


def _wheels_by_name(wheelhouse: Path) -> dict[str, Path]:
    wheels = ((lockfile.parse_wheel_filename(w.name), w) for w in wheelhouse.glob("*.whl"))
    return {parsed.name: w for parsed, w in wheels if parsed}


def generate(
    lock: Path,
    wheelhouse: Path,
    pax_wheel: Path,
    release: str,
    platform: str,
    epoch: int,
    verify_hashes: bool = True,
    left_out: tuple[str, ...] = (),
    python: str = catalog.PYTHON,
) -> str:
    """The SBOM as JSON text. The wheelhouse must hold exactly the lock's wheels (the build
    checks it first); a wheel whose sha256 the lock does not list is refused here too, unless
    verify_hashes is off (the build then relies on pip's --require-hashes alone, and the SBOM
    records each wheel's own digest). `left_out`: lock pins the recipe removes from the image;
    `python`: the image's Python, which the dependency edges' markers are evaluated for."""
    from cyclonedx.contrib.this.builders import this_component
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.output.json import JsonV1Dot6

    lock_sha = lockfile.sha256_file(lock)
    parts, metas = _components(lock, wheelhouse, pax_wheel, verify_hashes, left_out)
    subject = _subject(release, platform, lock_sha, python, left_out)
    pax_sha = lockfile.sha256_file(pax_wheel)
    bom = Bom(
        serial_number=uuid.uuid5(
            uuid.NAMESPACE_URL, f"pax-sbom:{release}-{platform}:{lock_sha}:{pax_sha}"
        ),
        metadata=BomMetaData(
            component=subject,
            timestamp=datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc),
        ),
    )
    bom.metadata.tools.components.add(this_component())
    for part in parts.values():
        bom.components.add(part)
    bom.register_dependency(subject, parts.values())
    _register_requirements(bom, parts, metas, python)
    return JsonV1Dot6(bom).output_as_string(indent=1) + "\n"


def _components(lock: Path, wheelhouse: Path, pax_wheel: Path, verify_hashes: bool, left_out):
    """({name: component}, {name: wheel metadata}): one per lock pin the image keeps, from the
    wheel it installs, then pax's."""
    from cyclonedx.contrib.license.factories import LicenseFactory
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.model.license import LicenseAcknowledgement
    from packageurl import PackageURL

    factory, declared = LicenseFactory(), LicenseAcknowledgement.DECLARED

    def component(name, version, wheel, meta):
        digest = lockfile.sha256_file(wheel)
        purl = PackageURL("pypi", name=name, version=version)
        return Component(
            type=ComponentType.LIBRARY,
            name=name,
            version=version,
            bom_ref=str(purl),
            purl=purl,
            hashes=[HashType(alg=HashAlgorithm.SHA_256, content=digest)],
            licenses=_licenses(meta, factory, declared),
            properties=[Property(name="pax:wheel", value=wheel.name)],
        )

    wheels = _wheels_by_name(wheelhouse)
    pins = lockfile.parse_lockfile(lock)
    unknown = sorted(set(left_out) - set(pins))
    if unknown:
        raise ImageError(
            f"SBOM: the recipe leaves out {', '.join(unknown)}, which {lock} does not pin"
        )
    metas, parts = {}, {}
    for name, pin in sorted(pins.items()):
        if name in left_out:
            continue
        wheel = wheels.get(name)
        if wheel is None:
            raise ImageError(f"SBOM: no wheel for {name}=={pin.version} in {wheelhouse}")
        if verify_hashes and f"sha256:{lockfile.sha256_file(wheel)}" not in pin.hashes:
            raise ImageError(
                f"wheel hash mismatch: {wheel.name} has a sha256 that {lock} does not list "
                f"(tampered or corrupt wheelhouse); delete {wheelhouse} and rerun"
            )
        metas[name] = _wheel_metadata(wheel)
        parts[name] = component(name, pin.version, wheel, metas[name])
    metas["pax"] = _wheel_metadata(pax_wheel)
    parts["pax"] = component("pax", metas["pax"]["Version"], pax_wheel, metas["pax"])
    return parts, metas


def _subject(release: str, platform: str, lock_sha: str, python: str, left_out=()):
    """The image itself: the BOM's subject."""
    from cyclonedx.model import Property
    from cyclonedx.model.component import Component, ComponentType

    return Component(
        type=ComponentType.CONTAINER,
        name="pax",
        version=f"{release}-{platform}",
        bom_ref=f"pax-image:{release}-{platform}",
        properties=[
            Property(name="pax:release", value=release),
            Property(name="pax:platform", value=platform),
            Property(name="pax:lock.sha256", value=lock_sha),
            Property(name="pax:python", value=python),
            *(
                [Property(name="pax:left_out", value=" ".join(sorted(left_out)))]
                if left_out
                else []
            ),
        ],
    )


def _register_requirements(bom, parts: dict, metas: dict, python: str) -> None:
    """Edges from each wheel's Requires-Dist that hold in the image: markers evaluated for the
    image's CPython `python` on Linux x86_64 (this host's other markers, as the wheelhouse's
    platform is this one's); no extras."""
    from packaging.requirements import InvalidRequirement, Requirement

    image = {"extra": "", "python_version": python, "python_full_version": python}
    for name, meta in metas.items():
        needs = set()
        for line in meta.get_all("Requires-Dist") or []:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if req.marker is None or req.marker.evaluate(image):
                needs.add(lockfile.canonicalize(req.name))
        bom.register_dependency(parts[name], [parts[n] for n in sorted(needs) if n in parts])


def check(text: str, lock: Path, release: str, platform: str) -> dict:
    """Stdlib check of an SBOM read back from an image: CycloneDX 1.6, about this image, one
    component per lock pin at the locked version with a hash the lock lists, but for the pins its
    subject names as left out, plus pax."""
    try:
        bom = json.loads(text)
    except json.JSONDecodeError as e:
        raise ImageError(f"SBOM: not JSON ({e})") from None
    if bom.get("bomFormat") != "CycloneDX" or bom.get("specVersion") != SPEC_VERSION:
        raise ImageError(
            f"SBOM: not CycloneDX {SPEC_VERSION} (bomFormat {bom.get('bomFormat')!r}, "
            f"specVersion {bom.get('specVersion')!r})"
        )
    subject = bom.get("metadata", {}).get("component", {})
    if (subject.get("name"), subject.get("version")) != ("pax", f"{release}-{platform}"):
        raise ImageError(
            f"SBOM: describes {subject.get('name')}:{subject.get('version')}, not pax "
            f"{release}-{platform}"
        )
    pins = lockfile.parse_lockfile(lock)
    props = {p.get("name"): p.get("value", "") for p in subject.get("properties", [])}
    left_out = set(props.get("pax:left_out", "").split())
    found, pax = {}, None
    for part in bom.get("components", []):
        hashes = {h.get("content") for h in part.get("hashes", []) if h.get("alg") == "SHA-256"}
        if part.get("name") == "pax":
            pax = part.get("version")
            continue
        pin = pins.get(part.get("name"))
        if pin is None or part.get("version") != pin.version:
            raise ImageError(f"SBOM: {part.get('name')}=={part.get('version')} is not in {lock}")
        if pin.name in left_out:
            raise ImageError(f"SBOM: lists {pin.name}, which it also names as left out")
        if not hashes & {h.split(":", 1)[1] for h in pin.hashes if h.startswith("sha256:")}:
            raise ImageError(f"SBOM: {pin.name}'s hash is not one {lock} lists")
        found[pin.name] = pin.version
    if left_out - set(pins):
        raise ImageError(
            f"SBOM: names {', '.join(sorted(left_out - set(pins)))} as left out, "
            f"which {lock} does not pin"
        )
    missing = sorted(set(pins) - set(found) - left_out)
    if missing or pax is None:
        raise ImageError(f"SBOM: no component for {', '.join(missing or ['pax'])}")
    licensed = sum(1 for part in bom["components"] if part.get("licenses"))
    return {
        "components": len(found) + 1,
        "with_license": licensed,
        "pax": pax,
        **({"left_out": sorted(left_out)} if left_out else {}),
    }


def check_image(image: str, lock: Path, release: str, platform: str) -> dict:
    """Read the SBOM back out of an image: its sha256 (taken inside the image) must be the
    image's SBOM_LABEL, and its content must `check` against the lock."""
    text, digest = read_labelled_file(image, SBOM_IN_IMAGE, SBOM_LABEL)
    return {"sha256": digest, **check(text, lock, release, platform)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m pax.images.sbom",
        description="Write a pax image's CycloneDX SBOM from its lock, wheelhouse and pax wheel.",
    )
    p.add_argument("lock", type=Path)
    p.add_argument("wheelhouse", type=Path)
    p.add_argument("pax_wheel", type=Path)
    p.add_argument("--release", required=True)
    p.add_argument("--platform", required=True)
    p.add_argument("--epoch", type=int, required=True, help="SOURCE_DATE_EPOCH: the timestamp")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--python", default=catalog.PYTHON, help="the image's Python, e.g. 3.13")
    p.add_argument(
        "--left-out",
        action="append",
        default=[],
        metavar="NAME",
        help="a lock pin the image's recipe removes (repeat for more)",
    )
    p.add_argument(
        "--no-verify-hashes",
        action="store_true",
        help="record each wheel's own digest without checking it against the lock",
    )
    a = p.parse_args(argv)
    try:
        text = generate(
            a.lock,
            a.wheelhouse,
            a.pax_wheel,
            a.release,
            a.platform,
            a.epoch,
            verify_hashes=not a.no_verify_hashes,
            left_out=tuple(a.left_out),
            python=a.python,
        )
    except ImageError as e:
        return report("pax images", e)
    a.out.write_text(text)
    print(hashlib.sha256(text.encode()).hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main())
