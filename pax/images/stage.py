"""`python -m pax.images.stage`: a frozen release's build context, laid out by the release's own
tree. pax.images.frozen runs it from `git archive` of the release's source, in an interpreter
holding that tree's tools lock, so everything the image is made of comes from the release:
the recipe (Dockerfile.tpu, Dockerfile.gpu), the in-image check with its lock reader, the pax
wheel (built by the tree's pinned setuptools), the SBOM and provenance writers. Prints the
context's Dockerfile, build arguments and date as JSON.

Every later checkout calls the copy of this command that a frozen release's tree holds, with
the arguments below: they are a contract with those checkouts. Add to them, never rename or
drop one.

    python -m pax.images.stage --release 1.8.0 --platform tpu --revision SHA --epoch SECONDS
        --tag pax:1.8.0-tpu --wheelhouse DIR --base-id sha256:... --builder-version 1.28.2
        --out DIR [--no-verify-hashes]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pax import lockfile
from pax.errors import PaxError, report
from pax.images import context, paxwheel
from pax.images.target import PaxSource, Target
from pax.paths import ROOT
from pax.releases import catalog


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pax.images.stage", description=__doc__.split("\n")[0]
    )
    for name in ("release", "platform", "revision", "tag", "base-id", "builder-version"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--epoch", type=int, required=True, help="the source commit's time")
    p.add_argument("--wheelhouse", type=Path, required=True, help="exactly the lock's wheels")
    p.add_argument("--out", type=Path, required=True, help="a new folder for the context")
    p.add_argument("--no-verify-hashes", action="store_true")
    return p


def stage(a: argparse.Namespace) -> context.Context:
    """The context of the release's image on this tree (pax.paths.ROOT is the release's tree)."""
    release = catalog.resolve(a.release, ROOT)
    lock = release.lockfile(a.platform)
    target = Target(
        release, a.platform, lock, lockfile.sha256_file(lock), a.base_id,
        PaxSource(a.revision, False, a.epoch),
    )  # fmt: skip
    wheel = paxwheel.from_tree(ROOT, a.out / "paxwheel", target)
    return context.lay_out(
        target,
        a.tag,
        a.wheelhouse,
        wheel,
        a.out / "context",
        a.base_id,
        a.builder_version,
        verify_hashes=not a.no_verify_hashes,
    )


def main(argv: list[str] | None = None) -> int:
    try:
        ctx = stage(parser().parse_args(argv))
    except (PaxError, OSError) as e:
        return report("pax images stage", e)
    print(json.dumps({"dockerfile": str(ctx.dockerfile), "args": ctx.args, "epoch": ctx.epoch}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
