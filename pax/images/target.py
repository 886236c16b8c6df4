"""What an image command is about, resolved once from its arguments: the release's record, the
image platform, the lock (its sha256 checked against the record) and, where the command needs it,
where the image's pax comes from. Bad input is one ImageError (usage) raised here; every later
step takes the Target and looks nothing up again."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from pax import git
from pax.images.engine import ImageError, image_ref
from pax.lockfile import sha256_file
from pax.paths import ROOT
from pax.releases import catalog, source


@dataclasses.dataclass(frozen=True)
class PaxSource:
    """Where an image's pax comes from: a release's source commit, or (dev) this checkout."""

    revision: str  # the commit; a dev build of a changed tree adds "-dirty"
    dev: bool
    epoch: int  # the commit's time: the wheel's zip entries and the SBOM are dated by it

    @property
    def tag_suffix(self) -> str:
        """ "" for a release's image; "-dev.<short sha>[.dirty]" for the working tree's."""
        if not self.dev:
            return ""
        return f"-dev.{self.revision[:7]}" + (".dirty" if self.revision.endswith("-dirty") else "")


@dataclasses.dataclass(frozen=True)
class Target:
    """One release's image on one platform, as a command resolved it."""

    release: catalog.Release
    platform: str
    lock: Path
    lock_sha256: str
    base: str | None = None  # None: the release's local base (ci/base-image.sh builds it)
    source: PaxSource | None = None  # None: the command does not build or name a dev image

    @property
    def base_image(self) -> str:
        """What the image is built on: the one given, else pax-base:<the release's suite>."""
        return self.base or catalog.local_base_image(self.release.base_suite)

    @property
    def version(self) -> str:
        """1.7.0, nightly: what the image's tags, build arguments and context paths name."""
        return self.release.version

    @property
    def dev(self) -> bool:
        return self.source is not None and self.source.dev

    @property
    def suffix(self) -> str:
        return self.source.tag_suffix if self.source else ""

    @property
    def tag(self) -> str:
        """pax:<release>-<platform>, or a dev build's pax:<release>-<platform>-dev.<sha>[.dirty]."""
        return image_ref(self.version, self.platform) + self.suffix


def resolve(
    release: str,
    platform: str,
    base_image: str | None = None,
    dev: bool = False,
    with_source: bool = False,
) -> Target:
    """The target, or ImageError: a usage error for an unknown release or platform or a missing
    lock; a failure for a lock that is not the one the release records. With `with_source` (or
    `dev`), where its pax comes from: the release's source commit, present in this clone, or with
    dev this checkout's HEAD. `base_image` None: the release's local base."""
    if platform not in catalog.IMAGE_PLATFORMS:
        raise ImageError(
            f"unknown image platform {platform!r}: images exist for "
            f"{', '.join(catalog.IMAGE_PLATFORMS)}",
            usage=True,
        )
    try:
        rel = catalog.resolve(release)
    except catalog.UnknownRelease as e:
        raise ImageError(str(e), usage=True) from None
    except tomllib.TOMLDecodeError as e:
        raise ImageError(f"release {release}: release.toml: {e}") from None
    lock = rel.lockfile(platform)
    if not lock.is_file():
        raise ImageError(
            f"release {release} has no {platform} lockfile ({lock}); create it with "
            f"./noxw -s lock -- {release}",
            usage=True,
        )
    try:
        base_image = base_image or catalog.local_base_image(rel.base_suite)
    except catalog.NoBaseSuite as e:
        raise ImageError(str(e)) from None
    frozen, actual = rel.recorded_sha256(platform), sha256_file(lock)
    if frozen and frozen != actual:
        raise ImageError(
            f"{lock} has sha256 {actual[:12]}..., but {rel.dir}/release.toml "
            f"records {frozen[:12]}...; restore the lockfile (releases are frozen)"
        )
    origin = None
    if dev:
        origin = checkout_source()
    elif with_source:
        origin = release_source(rel, platform)
    return Target(rel, platform, lock, actual, base_image, origin)


def release_source(rel: catalog.Release, platform: str) -> PaxSource:
    """The release's recorded source commit, present in this clone (ImageError naming the fix)."""
    try:
        rev = source.require(rel, ROOT)
    except source.SourceError as e:
        raise ImageError(
            f"{e} (or build this checkout on its locks: ./noxw -s build -- {rel.version} "
            f"{platform} --dev)"
        ) from None
    return PaxSource(rev, False, source.commit_time(rev, ROOT))


def checkout_source() -> PaxSource:
    """This checkout's HEAD, "-dirty" when pax/ has uncommitted changes, dated by its last commit."""
    head = git_or_none("rev-parse", "HEAD")
    if head is None:
        raise ImageError("--dev builds need a git checkout: the tag names HEAD's commit")
    changed = git_or_none("status", "--porcelain", "--", "pax")
    return PaxSource(head.strip() + ("-dirty" if changed else ""), True, source_date_epoch())


def source_date_epoch() -> int:
    """The last commit's time: what a dev build's pax wheel and SBOM are dated."""
    return int((git_or_none("log", "-1", "--format=%ct") or "315532800").strip())


def git_or_none(*args: str) -> str | None:
    """git's output, or None outside a checkout (a source tree without .git still builds)."""
    try:
        return git.run(*args)
    except git.GitError:
        return None
