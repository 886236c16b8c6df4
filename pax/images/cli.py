"""Host side of the container images: wheelhouse, build, smoke test, publish.

Stdlib only (runs in nox's tools venv, imports no jax). The image recipe is in
Dockerfile.tpu / Dockerfile.gpu; this module prepares what they consume and checks what
they produce:

  wheelhouse  pip download exactly the release's lockfile (hash-checked, binary only,
              for Linux x86_64 CPython, the release's image Python) into wheelhouse/<release>-<platform>/
  build       pax wheel of the release's source commit + staged build context -> buildah
              (no network, dated by the source commit, pinned base) into the Docker engine;
              a frozen release (image_recipe = "source") is staged by its own tree, and a
              release that records a base or builder is refused on another;
              `pax:<release>-<platform>` is tagged only when the build (including pip's hash
              check, pip check and the lock comparison) succeeded. --dev: this checkout's pax
              on the release's locks, tagged `pax:<release>-<platform>-dev.<sha>[.dirty]`
  verify      build twice from scratch: the same image ID, or the files that differ; then that
              ID against the one the release records (release.toml [images]), or why not
  record      build the release's images and write their IDs, layers and base into its
              release.toml's [images] (the cut does; `./noxw -s release -- X --record-images`
              for a release that records none; one that has a record is refused)
  smoke       run the image offline on the tiny experiment and check the job directory
  publish     over HTTPS to HOST:PORT with the Docker config's credentials: push under a
              candidate tag, pull back by the registry's digest and verify, then move
              <release>-<platform> and latest-<platform> to that manifest
              (with --key, an ed25519 private key: signed provenance and SBOM attached to the
              digest, cosign's sha256-<hex>.att layout)
  provenance  read the image's provenance statement and check it against the release record
  check       REGISTRY/pax:RELEASE-PLATFORM --key PUB.pem: from the registry alone (no engine),
              the signed attestations, the release record and the recorded image ID

    python -m pax.images build 1.4.0 tpu
    python -m pax.images build 1.6.0 tpu --dev
    python -m pax.images verify 1.6.0 tpu
    python -m pax.images record 1.7.0 tpu gpu
    python -m pax.images smoke 1.4.0 tpu
    python -m pax.images publish 1.7.0 tpu --registry 127.0.0.1:5000 --key pax-signing.pem
    python -m pax.images check 127.0.0.1:5000/pax:1.7.0-tpu --key pax-signing.pub.pem

Errors are one line (`pax images: error: ...`), exit 2 for usage errors, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Optional

from pax.errors import PaxError, report
from pax.images import attest, provenance, record
from pax.images import check as check_lib
from pax.images.build import build, verify
from pax.images.engine import ImageError
from pax.images.publish import publish
from pax.images.smoke import SMOKE_STEPS, smoke
from pax.images.target import resolve
from pax.images.wheelhouse import prepare_wheelhouse
from pax.releases import catalog
from pax.releases import cut as release_cut

BASE_HELP = (
    "default $PAX_BASE_IMAGE, else the release's local base: "
    + ", ".join(
        f"{catalog.local_base_image(suite)} for Python {python}"
        for suite, python in catalog.BASE_SUITES.items()
    )
    + " (ci/base-image.sh); or the public one, e.g. "
    + ", ".join(catalog.public_base_image(suite) for suite in catalog.BASE_SUITES)
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pax.images", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("release")
    r.add_argument("platforms", nargs="*", help="default: tpu gpu")
    r.add_argument("--base-image", default=os.environ.get("PAX_BASE_IMAGE"), help=BASE_HELP)
    c = sub.add_parser("check")
    c.add_argument(
        "image", help="REGISTRY/REPO:RELEASE-PLATFORM, e.g. 127.0.0.1:5000/pax:1.7.0-tpu"
    )
    c.add_argument("--key", type=Path, required=True, help="the publisher's public key (PEM)")
    c.add_argument("--release", help="the release, for a tag that does not name it (latest-tpu)")
    c.add_argument("--ca-bundle", type=Path, help="CA certificates to trust (as publish)")
    for name in ("wheelhouse", "build", "verify", "smoke", "publish", "provenance"):
        s = sub.add_parser(name)
        s.add_argument("release")
        s.add_argument("platform")
        if name in ("build", "verify"):
            s.add_argument(
                "--base-image",
                default=os.environ.get("PAX_BASE_IMAGE"),
                help=BASE_HELP,
            )
            if name == "build":
                s.add_argument("--tag", help="default pax:RELEASE-PLATFORM")
            s.add_argument("--wheelhouse", type=Path, help="default wheelhouse/RELEASE-PLATFORM")
            s.add_argument(
                "--dev",
                action="store_true",
                help="pax from this checkout, not the release's source: pax:RELEASE-PLATFORM-"
                "dev.<sha>[.dirty]",
            )
        if name in ("smoke", "publish", "provenance"):
            s.add_argument(
                "--dev",
                action="store_true",
                help="the image `build --dev` tags for this checkout (pax:RELEASE-PLATFORM-dev.<sha>)",
            )
        if name in ("smoke", "provenance"):
            s.add_argument("--image", help="default pax:RELEASE-PLATFORM")
        if name == "smoke":
            s.add_argument("--steps", type=int, default=SMOKE_STEPS)
            s.add_argument("--keep", type=Path, help="keep the job directory here")
        if name == "publish":
            s.add_argument("--registry", required=True, help="HOST:PORT, e.g. 127.0.0.1:5000")
            s.add_argument("--image", help="default pax:RELEASE-PLATFORM")
            s.add_argument(
                "--key",
                type=Path,
                help=f"ed25519 private key (PEM) to sign the attestations with; make one: {attest.KEYGEN}",
            )
            s.add_argument(
                "--ca-bundle",
                type=Path,
                help="CA certificates to trust; default /etc/docker/certs.d/HOST:PORT/ca.crt "
                "when present, else the system's",
            )
    return p


def run(argv: list[str], log=sys.stderr) -> object:
    """Parse and run one command; raises ImageError (argparse exits 2 on malformed arguments).
    The release, platform and lock (and, for what builds or names a dev image, the source) are
    resolved here once; the commands take the Target."""
    a = parser().parse_args(argv)
    dev = getattr(a, "dev", False)
    if dev and a.cmd not in ("build", "verify") and a.image:
        raise ImageError(f"{a.cmd}: --dev and --image name the image twice; give one", usage=True)
    if a.cmd == "check":
        ref = check_lib.parse_ref(a.image, a.release)
        target = resolve(ref.release, ref.platform)
        return check_lib.check(ref, target, a.key, ca=a.ca_bundle, log=log)
    if a.cmd == "record":
        platforms = a.platforms or list(catalog.IMAGE_PLATFORMS)
        targets = [resolve(a.release, p, a.base_image, with_source=True) for p in platforms]
        return record.record(targets, log=log)
    base_image = getattr(a, "base_image", None)
    builds_image = a.cmd in ("build", "verify")
    target = resolve(a.release, a.platform, base_image, dev=dev, with_source=builds_image)
    if a.cmd == "wheelhouse":
        return prepare_wheelhouse(target, log=log)
    if a.cmd == "build":
        return build(target, tag=a.tag, wheels=a.wheelhouse, log=log)
    if a.cmd == "verify":
        result = verify(target, wheels=a.wheelhouse, log=log)
        if not dev:  # a dev image is this checkout's, which no release records
            result["record"] = record.against(target, result["image"], log=log)
        return result
    if a.cmd == "provenance":
        image = a.image or target.tag
        revision = target.source.revision if dev else None
        return provenance.check_image(image, target.release, a.platform, revision)
    if a.cmd == "smoke":
        return smoke(target, image=a.image, steps=a.steps, keep=a.keep, log=log)
    return publish(target, a.registry, image=a.image, ca=a.ca_bundle, key=a.key, log=log)


# nox's image sessions, `./noxw -s COMMAND -- ...`: what `./noxw -l` says of each, and its usage.
SESSIONS = {
    "build": (
        "Build pax:RELEASE-PLATFORM from the release's source: `build -- RELEASE tpu|gpu [--dev]`.",
        "RELEASE tpu|gpu [--dev] [--base-image IMAGE]",
    ),
    "verify": (
        "Build twice from scratch, compare image IDs, check provenance: `verify -- RELEASE PLATFORM`.",
        "RELEASE tpu|gpu [--dev] [--base-image IMAGE]",
    ),
    "smoke": (
        "Train the tiny LM in the image offline and check its job dir: `smoke -- RELEASE PLATFORM`.",
        "RELEASE tpu|gpu [--dev] [--steps N] [--keep DIR]",
    ),
    "publish": (
        "Push a candidate, verify it pulled back, then move the tags: `publish -- RELEASE PLATFORM ...`.",
        "RELEASE tpu|gpu [--dev] --registry HOST:PORT [--key PEM]",
    ),
    "check": (
        "Check a published image from the registry alone: `check -- REGISTRY/pax:X-P --key PUB.pem`.",
        "REGISTRY/pax:X-P --key PUB.pem",
    ),
}


def run_command(command: str, args, usage: str, log=sys.stderr) -> object:
    """`./noxw -s COMMAND -- RELEASE PLATFORM ...`: without both, a one-line usage error (the
    session's) rather than argparse's; else `run`."""
    if len([a for a in args if not a.startswith("-")]) < 2:
        raise ImageError(f"usage: ./noxw -s {command} -- {usage}", usage=True)
    return run([command, *args], log=log)


def cut_or_record(args: list[str], root: Path | None = None, log=print) -> object:
    """`./noxw -s release -- X.Y.Z [--recreate]`: cut the release, its images recorded as the
    cut builds them (None); `-- X.Y.Z --record-images [PLATFORM...]`: record the images of a
    release cut before, its locks untouched (what record wrote)."""
    if "--record-images" in args:
        return run(["record", *(a for a in args if a != "--record-images")])

    def record_images(version: str, base_image: str) -> None:
        run(["record", version, "--base-image", base_image])

    release_cut.cut_from_args(args, root, log=log, record_images=record_images)
    return None


def main(argv: Optional[list[str]] = None) -> int:
    try:
        result = run(sys.argv[1:] if argv is None else argv)
    except (PaxError, RuntimeError) as e:  # RuntimeError: no pip to download or build with
        return report("pax images", e)
    except KeyboardInterrupt:
        return 130
    print(json.dumps(result) if isinstance(result, dict) else result)
    return 0
