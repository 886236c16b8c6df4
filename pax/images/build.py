"""pax:<release>-<platform>, built by buildah (pax.images.buildah) from a staged context
(pax.images.context): the lock, its wheelhouse, a pax wheel of the release's source commit (with
--dev, of this checkout, tagged pax:<release>-<platform>-dev.<sha>), the env's identity file, the
image's SBOM and its provenance statement; the tag is set only when the whole build succeeded.
The recipe (Dockerfile, in-image check) is this checkout's, named in the image by its content's
sha256, except for a frozen release (cut from 1.8.0 on), whose own tree lays out its context
(pax.images.frozen); everything is dated by the source commit, so the same release and recipe
on the same base give the same image ID whenever they are built.

A build is five steps, each once: stage (the base and the builder, pinned), wheelhouse (exactly
the lock's wheels), context (the pax wheel and everything the recipe copies), buildah, check."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional

from pax.errors import last_line
from pax.images import buildah, context, frozen, paxwheel, provenance, reproduce, wheelhouse
from pax.images.engine import IMAGE_REPO, ImageError, image_size, label, require_engine
from pax.images.target import Target
from pax.releases import source


@contextlib.contextmanager
def staged(
    target: Target,
    tag: str,
    wheels: Optional[Path] = None,
    check_hashes: bool = True,
    log=sys.stderr,
) -> Iterator[context.Context]:
    """Stage, wheelhouse and context: a build's context in a temporary folder (removed on exit).
    A release that records a base and builder is refused on others; a frozen one's context is
    laid out by its own tree (pax.images.frozen)."""
    base_id, builder_version = buildah.pinned(target.base_image)
    frozen.require_recorded(target, base_id, builder_version)
    wheels = wheelhouse.for_build(target, wheels, check_hashes, log=log)
    if source.builds_own_images(target.release) and not target.dev:
        with frozen.staged(
            target, tag, wheels, base_id, builder_version, check_hashes, log=log
        ) as ctx:
            yield ctx
        return
    with tempfile.TemporaryDirectory(prefix="pax-ctx-") as tmp:
        pax_wheel = paxwheel.build(Path(tmp) / "paxwheel", target)
        yield context.lay_out(
            target,
            tag,
            wheels,
            pax_wheel,
            Path(tmp) / "context",
            base_id,
            builder_version,
            verify_hashes=check_hashes,
            log=log,
        )


def build(
    target: Target,
    tag: Optional[str] = None,
    wheels: Optional[Path] = None,
    check_hashes: bool = True,
    log=sys.stderr,
) -> str:
    """Build the target's image into the Docker engine; returns its tag (default target.tag), set
    only when the whole build succeeded. `wheels`: another wheelhouse than the default; without
    `check_hashes` the host leaves the wheels' hashes to pip's --require-hashes."""
    require_engine()
    tag = tag or target.tag
    with staged(target, tag, wheels, check_hashes, log) as ctx:
        # The provenance digest covers every input (source, locks, wheels, base, recipe,
        # builder) and the build reproduces, so an image that carries it is this build's result.
        if label(tag, provenance.LABEL, missing_ok=True) == ctx.args["PROVENANCE_SHA256"]:
            print(f"pax images: {tag} is up to date (same provenance)", file=log)
            return tag
        store_tag = f"localhost/{IMAGE_REPO}-build:{target.version}-{target.platform}-{os.getpid()}"
        t0 = time.monotonic()
        try:
            image_id = buildah.build_into_docker(
                ctx.path, ctx.dockerfile, store_tag, ctx.args, ctx.epoch, tag
            )
        except buildah.BuildFailed as e:
            raise _failure(e, target, tag) from None
    print(
        f"pax images: built {tag} {image_id} in {time.monotonic() - t0:.0f}s, "
        f"{image_size(tag) / 1e6:.0f} MB",
        file=log,
    )
    return tag


def verify(target: Target, wheels: Optional[Path] = None, log=sys.stderr) -> dict:
    """Build the image twice, each staged and built from scratch: the same image ID, or
    ImageError naming what differs (pax.images.reproduce). The image then goes into the Docker
    engine under its tag, as `build` puts it, and its provenance is checked against the release
    record."""
    require_engine()
    ids, seconds, tagged = [], [], reproduce.tags()
    try:
        for store_tag in tagged:
            t0 = time.monotonic()
            with staged(target, target.tag, wheels, log=log) as ctx:
                try:
                    image_id, _ = buildah.build(
                        ctx.path, ctx.dockerfile, store_tag, ctx.args, ctx.epoch
                    )
                except buildah.BuildFailed as e:
                    raise _failure(e, target, target.tag) from None
            ids.append(image_id)
            seconds.append(round(time.monotonic() - t0, 1))
            print(
                f"pax images: verify build {len(ids)}: {image_id} in {seconds[-1]:.0f}s", file=log
            )
        reproduce.compare_builds(ids, tagged)
        buildah.to_docker(tagged[0], target.tag)
    finally:
        buildah.remove(*tagged)
    origin = provenance.check_image(
        target.tag, target.release, target.platform, target.source.revision
    )
    print(f"pax images: {target.tag} reproduces: {ids[0]}", file=log)
    return {"image": target.tag, "image_id": ids[0], "build_seconds": seconds, "provenance": origin}


def _failure(e: buildah.BuildFailed, target: Target, tag: str) -> ImageError:
    """The failed build's one line (pip's hash refusal named as such), its log saved."""
    d = Path(tempfile.gettempdir()) / "pax-build-logs"
    d.mkdir(exist_ok=True)
    saved = d / f"{target.version}-{target.platform}-{int(time.time())}.log"
    saved.write_text(e.output)
    if any(m in e.output for m in wheelhouse.HASH_MISMATCH_MARKERS):
        return ImageError(
            f"wheel hash mismatch: pip refused a wheel that does not match "
            f"releases/{target.version}/{target.platform}.txt (tampered or corrupt wheelhouse); "
            f"delete wheelhouse/{target.version}-{target.platform} and rerun; no image tagged; "
            f"log {saved}"
        )
    lines = e.output.splitlines()
    errors = [ln for ln in lines if "pax-verify" in ln or "ERROR" in ln or "error" in ln]
    tail = last_line("\n".join(errors), e.output, default="(no output)")
    return ImageError(f"build of {tag} failed: {tail}; no image tagged; log {saved}")
