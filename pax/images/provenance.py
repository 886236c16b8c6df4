"""The image's build provenance: an in-toto Statement (v1) with a SLSA Provenance (v1) predicate,
at /opt/pax/provenance.intoto.json beside the SBOM, its sha256 the image's label
io.pax.provenance.sha256 (digested, not signed: a registry's digest of the image covers both).

It names what the image was built from: the release's source revision, the sha256 of the
release's locks, the base image's ID, the recipe's files by digest, the build command and the
builder. Nothing in it depends on the wall clock or on the checkout's HEAD, so it does not
change the image ID of a build that reproduces. `./noxw -s provenance -- RELEASE PLATFORM` reads
it out of the image and checks it against the release record (releases/RELEASE/release.toml).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pax.images.engine import ImageError, label, read_labelled_file
from pax.releases import catalog

IN_IMAGE = "/opt/pax/provenance.intoto.json"
LABEL = "io.pax.provenance.sha256"
FILENAME = "provenance.intoto.json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
# URNs rather than URLs: the build type and the builder are documented in docs/releases.md, not
# served. SLSA's builder.id is a URI naming who builds; which buildah did is builder.version.
BUILD_TYPE = "urn:pax:image-build:v1"
BUILDER_ID = "urn:pax:builder:buildah"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def statement(
    release: catalog.Release,
    platform: str,
    revision: str,
    base_id: str,
    recipe: dict[str, Path],
    subjects: dict[str, Path],
    command: list[str],
    builder_version: str,
    python: str,
) -> dict:
    """The statement for an image of `release` on `platform`: `recipe` and `subjects` map a name
    to a file (the Dockerfile and the in-image check; the pax wheel, the lock and the SBOM);
    `builder_version` is buildah's ("1.28.2"); `python` the image's Python, the base's python3
    ("3.13"), which the wheels were fetched for."""
    locks = {
        f"releases/{release.version}/{name}.txt": release.recorded_sha256(name)
        for name in (*catalog.LOCK_PLATFORMS, "test")
        if release.recorded_sha256(name)
    }
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": name, "digest": {"sha256": _sha256(path)}} for name, path in subjects.items()
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "release": release.version,
                    "platform": platform,
                    "source": {"digest": {"gitCommit": revision}},
                },
                "internalParameters": {"command": command, "python": python},
                "resolvedDependencies": [
                    {"name": "source", "digest": {"gitCommit": revision}},
                    {"name": "base-image", "digest": {"sha256": base_id.removeprefix("sha256:")}},
                    *({"name": name, "digest": {"sha256": sha}} for name, sha in locks.items()),
                    *(
                        {"name": f"recipe/{name}", "digest": {"sha256": _sha256(path)}}
                        for name, path in recipe.items()
                    ),
                ],
            },
            "runDetails": {"builder": {"id": BUILDER_ID, "version": {"buildah": builder_version}}},
        },
    }


def write(doc: dict, dest: Path) -> str:
    """Write the statement (sorted keys: the same statement, the same bytes); its sha256."""
    dest.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return _sha256(dest)


def check(
    doc: dict, release: catalog.Release, platform: str, revision: str | None = None
) -> list[str]:
    """What in the statement disagrees with the release record (empty: it agrees); `revision`
    replaces the recorded source for a -dev image of this checkout."""
    problems = []
    if doc.get("_type") != STATEMENT_TYPE or doc.get("predicateType") != PREDICATE_TYPE:
        return [f"not an in-toto {PREDICATE_TYPE} statement"]
    definition = doc["predicate"]["buildDefinition"]
    params = definition["externalParameters"]
    if (params.get("release"), params.get("platform")) != (release.version, platform):
        problems.append(f"built as {params.get('release')} {params.get('platform')}")
    recorded = revision or release.meta.get("source")
    built = params.get("source", {}).get("digest", {}).get("gitCommit")
    if recorded and built != recorded:
        problems.append(f"source {built}, the release records {recorded}")
    python = definition.get("internalParameters", {}).get("python")  # absent before 1.9.0
    if python is not None and python not in release.pythons:
        problems.append(
            f"built for Python {python}, the release installs on {', '.join(release.pythons)}"
        )
    digests = {d.get("name"): d["digest"].get("sha256") for d in definition["resolvedDependencies"]}
    for name in (*catalog.LOCK_PLATFORMS, "test"):
        want = release.recorded_sha256(name)
        got = digests.get(f"releases/{release.version}/{name}.txt")
        if want and got != want:
            problems.append(f"{name} lock sha256 {str(got)[:12]}, the release records {want[:12]}")
    subjects = {s["name"]: s["digest"]["sha256"] for s in doc.get("subject", [])}
    lock = subjects.get(f"releases/{release.version}/{platform}.txt")
    if lock != release.recorded_sha256(platform):
        problems.append(f"the image's lock has sha256 {str(lock)[:12]}, not the release's")
    return problems


def base_id(doc: dict) -> str:
    """The base image's ID the statement names, "sha256:<hex>"."""
    deps = doc["predicate"]["buildDefinition"]["resolvedDependencies"]
    base = next((d["digest"]["sha256"] for d in deps if d.get("name") == "base-image"), None)
    return f"sha256:{base}"


def check_image(
    image: str, release: catalog.Release, platform: str, revision: str | None = None
) -> dict:
    """Read the statement out of an image (its sha256 must be the label's) and check it against
    the release record (`check`), the image's SBOM label and its base-image label."""
    text, sha = read_labelled_file(image, IN_IMAGE, LABEL)
    doc = json.loads(text)
    problems = check(doc, release, platform, revision)
    subjects = {s["name"]: s["digest"]["sha256"] for s in doc.get("subject", [])}
    if subjects.get("sbom.cdx.json") != label(image, "io.pax.sbom.sha256"):
        problems.append("its SBOM digest is not the image's io.pax.sbom.sha256")
    base = base_id(doc)
    if base != label(image, "io.pax.base.id"):
        problems.append(f"base image {base[:19]} is not the label io.pax.base.id")
    if problems:
        raise ImageError(f"{image}: provenance disagrees: " + "; ".join(problems))
    definition = doc["predicate"]["buildDefinition"]
    return {
        "sha256": sha,
        "source": definition["externalParameters"]["source"]["digest"]["gitCommit"],
        "base": base,
        "builder": doc["predicate"]["runDetails"]["builder"],
    }
