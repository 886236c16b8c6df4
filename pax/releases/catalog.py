"""Releases: `releases/<version>/release.toml` plus one lockfile per platform."""

from __future__ import annotations

import dataclasses
import re
import sys
import tomllib
from pathlib import Path

from pax import interpreters, lockfile, paths
from pax.errors import PaxError, UsageError
from pax.lockfile import sha256_file, version_key

# The Pythons this checkout runs on (pyproject.toml's requires-python, ./noxw's tools venv). Each
# release names the ones its locks install on (release.toml's `python`); a release cut now is
# compiled with the first of CUT_PYTHONS and installs on both (jax 0.11 and later need 3.12).
# What cannot import these (./noxw, the Dockerfiles, pyproject.toml) is checked against them by
# tests/test_declared_once.py.
PYTHONS = ("3.11", "3.12", "3.13")
CUT_PYTHONS = ("3.12", "3.13")
# The Python of releases that name none.
PYTHON = "3.11"
# The Debian suites a release's images stand on, each with its python3, the image's interpreter:
# a release's images stand on the first whose python3 is one of the release's Pythons (bookworm
# for 3.11, trixie for 3.12 and later). ci/base-image.sh builds each offline as
# local_base_image(suite), which `nox -s build` uses and a release records; public_base_image is
# the public slim Python on the same suite, for users with a registry (the Dockerfiles' `ARG
# BASE_IMAGE` default is the newest suite's).
BASE_SUITES = {"bookworm": "3.11", "trixie": "3.13"}


def suite_for(pythons: tuple[str, ...]) -> str | None:
    """The first of BASE_SUITES whose python3 is one of `pythons`; None where none is."""
    return next((suite for suite, python in BASE_SUITES.items() if python in pythons), None)


def local_base_image(suite: str) -> str:
    return f"pax-base:{suite}"


def public_base_image(suite: str) -> str:
    return f"python:{BASE_SUITES[suite]}-slim-{suite}"


LOCK_PLATFORMS = ("cpu", "tpu", "gpu")  # one lockfile each per release: what the trainer runs on
# Test and notebook tools, locked beside the product locks (agreeing with the cpu lock on what both
# name) so those stay the trainer's alone. Releases up to 1.6.0 have none: their cpu lock holds them.
TEST_LOCK = "test"
LOCKS = (*LOCK_PLATFORMS, TEST_LOCK)  # the files a release.toml's [locks] can record
IMAGE_PLATFORMS = ("tpu", "gpu")  # one container image each per release (cpu: the venvs)
NIGHTLY = "nightly"  # today's newest, compiled into git-ignored releases/nightly/
HEADLINE = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "tensorstore")
_VERSION_RE = re.compile(r"^\d+(\.\d+)*$")
_PLATFORM_LIKE_RE = re.compile(r"[A-Za-z][\w-]*")  # a word, not a flag, path or pytest node


class UnknownRelease(UsageError, LookupError):
    def __init__(self, name: str, known: list[str]):
        self.name, self.known = name, known
        listed = ", ".join(known) if known else "none"
        super().__init__(f"unknown release {name!r}; known releases: {listed} (see releases/)")


class UnknownPlatform(UsageError, LookupError):
    def __init__(self, name: str):
        super().__init__(f"unknown platform {name!r} ({', '.join(LOCK_PLATFORMS)})")


class TestLockMismatch(PaxError, RuntimeError):
    """A release's test lock pins a package the cpu lock also pins at another version."""


class NoBaseSuite(PaxError, LookupError):
    """No Debian suite the images stand on has a python3 the release installs on."""


@dataclasses.dataclass(frozen=True)
class Release:
    version: str
    dir: Path
    meta: dict

    @property
    def pins(self) -> dict[str, str]:
        """Headline versions, fed to pip-compile as constraints."""
        return dict(self.meta.get("versions", {}))

    @property
    def pythons(self) -> tuple[str, ...]:
        """The Pythons its locks install on, the one they are compiled with first: release.toml's
        `python`, one version ("3.11") or a list (["3.12", "3.13"])."""
        value = self.meta.get("python", PYTHON)
        return tuple(map(str, value)) if isinstance(value, list) else (str(value),)

    @property
    def python(self) -> str:
        """The Python its locks are compiled with."""
        return self.pythons[0]

    @property
    def base_suite(self) -> str:
        """The Debian suite its images stand on (suite_for; NoBaseSuite where none is)."""
        suite = suite_for(self.pythons)
        if suite is not None:
            return suite
        raise NoBaseSuite(
            f"release {self.version} installs on Python {', '.join(self.pythons)}, which no "
            f"image base provides ({', '.join(f'{s}: {p}' for s, p in BASE_SUITES.items())}); "
            "add the suite to pax.releases.catalog.BASE_SUITES and ci/base-image.sh"
        )

    @property
    def image_python(self) -> str:
        """The Python its images run: the base suite's python3."""
        return BASE_SUITES[self.base_suite]

    @property
    def resolved_before(self) -> str | None:
        """Upload cut-off: locking sees only what the index had then (reproducible relocks)."""
        value = self.meta.get("resolved_before")
        if value is None:
            return None
        text = value.isoformat() if hasattr(value, "isoformat") else str(value)
        return text.replace("+00:00", "Z")

    def lockfile(self, platform: str) -> Path:
        """releases/<v>/<platform>.txt; `TEST_LOCK` names the test tools' lock."""
        if platform not in LOCKS:
            raise UnknownPlatform(platform)
        return self.dir / f"{platform}.txt"

    def lock(self, platform: str) -> lockfile.Lock:
        """The release's lock for PLATFORM, parsed (LockfileError on a line that is no pin)."""
        return lockfile.Lock.read(self.lockfile(platform), release=self.version, platform=platform)

    @property
    def test_lock(self) -> Path | None:
        """The test tools' lock, or None where the cpu lock carries them (the older layout)."""
        path = self.lockfile(TEST_LOCK)
        return path if path.is_file() else None

    def recorded_sha256(self, platform: str) -> str | None:
        return self.meta.get("locks", {}).get(platform)

    def lock_sha256(self, platform: str) -> str:
        return sha256_file(self.lockfile(platform))

    def check_test_lock(self) -> None:
        """TestLockMismatch unless the test lock pins each package it shares with the cpu lock at
        the cpu lock's version: the test tools sit beside the cpu env and import its packages."""
        if self.test_lock is None:
            return
        product, tools = self.lock("cpu"), lockfile.Lock.read(self.test_lock)
        differ = lockfile.disagreements(product.versions, tools.versions)
        if differ:
            listed = ", ".join(f"{n} {t} (cpu.txt {c})" for n, (c, t) in differ.items())
            raise TestLockMismatch(
                f"releases/{self.dir.name}/test.txt disagrees with cpu.txt on {len(differ)} "
                f"package(s): {listed}; relock both: ./noxw -s lock -- {self.version} cpu test"
            )

    @property
    def constraints_file(self) -> Path:
        return self.dir / "constraints.txt"


def load(directory: Path) -> Release:
    with open(directory / "release.toml", "rb") as f:
        meta = tomllib.load(f)
    return Release(str(meta.get("version", directory.name)), directory, meta)


def list_releases(root: Path | None = None) -> list[Release]:
    """Cut releases (not nightly), oldest first."""
    base = paths.releases_dir(root)
    found = (
        [
            load(d)
            for d in base.iterdir()
            if d.is_dir() and _VERSION_RE.match(d.name) and (d / "release.toml").is_file()
        ]
        if base.is_dir()
        else []
    )
    return sorted(found, key=lambda r: version_key(r.version))


def newest(root: Path | None = None) -> Release:
    cut = list_releases(root)
    if not cut:
        raise UnknownRelease("newest", [])
    return cut[-1]


def runnable(root: Path | None = None) -> Release:
    """The newest cut release this machine has a Python for, so a machine with only Python 3.11
    runs the newest release for 3.11 (saying so on stderr); the newest when none has one, whose
    env then names the Python it needs."""
    cut = list_releases(root)
    for release in reversed(cut):
        if any(interpreters.find(version) for version in release.pythons):
            if release is not cut[-1]:
                print(
                    f"note: release {cut[-1].version} needs Python {' or '.join(cut[-1].pythons)}, "
                    f"which this machine lacks; taking {release.version}, the newest for Python "
                    f"{' or '.join(release.pythons)} (name a release to choose)",
                    file=sys.stderr,
                )
            return release
    return newest(root)


def resolve(name: str | None, root: Path | None = None) -> Release:
    """`None` -> the newest cut release this machine can run (`runnable`); `1.4.0` / `v1.4.0` /
    `r1.4.0` -> that one; `nightly` if locked."""
    if name is None:
        return runnable(root)
    wanted = name[1:] if name[:1] in ("v", "r") and _VERSION_RE.match(name[1:]) else name
    for release in list_releases(root):
        if release.version == wanted:
            return release
    nightly_dir = paths.releases_dir(root) / NIGHTLY
    if wanted == NIGHTLY and (nightly_dir / "release.toml").is_file():
        return load(nightly_dir)
    known = [r.version for r in list_releases(root)]
    if (nightly_dir / "release.toml").is_file():
        known.append(NIGHTLY)
    raise UnknownRelease(name, known)


def looks_like_release(arg: str) -> bool:
    """Whether a session's first positional argument names a release (vs a flag/pytest arg)."""
    bare = arg[1:] if arg[:1] in ("v", "r") else arg
    return arg == NIGHTLY or bool(_VERSION_RE.match(bare))


def pop_release(args: list[str], root: Path | None = None) -> Release:
    """Pop an optional leading release name off a session's args; default: the newest cut
    release. UnknownRelease for a name that is none."""
    return resolve(_pop_release_name(args), root)


def _pop_release_name(args: list[str]) -> str | None:
    return args.pop(0) if args and looks_like_release(args[0]) else None


def pop_platform(args: list[str], default: str = "cpu") -> str:
    """Pop an optional leading lock platform off a session's args. A leading bare word that is
    none (`tpux`) is UnknownPlatform: it stands where the platform goes, and what follows is
    flags, or paths that exist (pytest's), never other words."""
    if not args or args[0] in LOCK_PLATFORMS:
        return args.pop(0) if args else default
    if _PLATFORM_LIKE_RE.fullmatch(args[0]) and not Path(args[0]).exists():
        raise UnknownPlatform(args[0])
    return default


def pop_release_and_platform(
    args: list[str], root: Path | None = None, default: str = "cpu"
) -> tuple[Release, str]:
    """Both leading words, `[RELEASE] [PLATFORM]`; a mistyped platform is refused before the
    release is looked up, so `1.9.0 tpux` names the word that is surely wrong."""
    name = _pop_release_name(args)
    platform = pop_platform(args, default)
    return resolve(name, root), platform
