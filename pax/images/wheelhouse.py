"""The wheelhouse: exactly a release lock's wheels, for the image's Linux x86_64 CPython,
downloaded hash-checked into wheelhouse/<release>-<platform>/ and checked before every build.

Why not pax.environments.wheelcache, the other wheel store: a build context must hold one lock's
wheels and nothing else (the image's layers are those files), for the image's interpreter and
platform, not this host's; the cache holds every version a bisect walks through, for the
interpreter here. Both download through pax.environments.install and check each file's sha256
against the lock's pin (pax.lockfile.Pin.sha256s)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from pax import lockfile, paths
from pax.environments import install
from pax.errors import last_line
from pax.images.engine import ImageError
from pax.images.target import Target

# Linux x86_64 with each base suite's glibc (2.36 in bookworm, 2.41 in trixie), the same for the
# local base and the public one of a suite (catalog.local_base_image, public_base_image).
GLIBC_MINOR = {"bookworm": 36, "trixie": 41}
HASH_MISMATCH_MARKERS = ("DO NOT MATCH THE HASHES", "THESE PACKAGES DO NOT MATCH")


sha256_file = lockfile.sha256_file


def wheel_platforms(glibc_minor: int) -> list[str]:
    """The manylinux tags a glibc 2.<glibc_minor> x86_64 system installs, newest first: pip does
    not expand a manylinux_2_N --platform to older tags, so each is listed."""
    newer = [f"manylinux_2_{n}_x86_64" for n in range(glibc_minor, 16, -1)]
    return newer + ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]


def _pins(path: Path) -> dict[str, lockfile.Pin]:
    try:
        return lockfile.Lock.read(path).pins
    except lockfile.LockfileError as e:
        raise ImageError(str(e)) from None


def wheelhouse_dir(release: str, platform: str) -> Path:
    base = Path(os.environ.get("PAX_WHEELHOUSE", paths.ROOT / "wheelhouse"))
    return base / f"{release}-{platform}"


def check_wheelhouse(lock: Path, wheelhouse: Path) -> None:
    """Every lock entry has exactly one wheel here whose sha256 the lock lists, and nothing else."""
    entries = _pins(lock)
    wheels = sorted(wheelhouse.glob("*.whl")) if wheelhouse.is_dir() else []
    by_name: dict[str, list[Path]] = {}
    for w in wheels:
        parsed = lockfile.parse_wheel_filename(w.name)
        by_name.setdefault(parsed.name if parsed else w.name, []).append(w)
    missing = sorted(set(entries) - set(by_name))
    if missing:
        raise ImageError(
            f"wheelhouse {wheelhouse} lacks wheels for {', '.join(missing)}; "
            f"rerun the wheelhouse step"
        )
    extra = sorted(set(by_name) - set(entries))
    if extra:
        raise ImageError(
            f"wheelhouse {wheelhouse} holds wheels not in {lock}: {', '.join(extra)}; "
            f"delete the directory and rerun the wheelhouse step"
        )
    for name, files in by_name.items():
        digests = entries[name].sha256s
        if len(files) != 1:
            raise ImageError(
                f"wheelhouse {wheelhouse} holds {len(files)} wheels for {name}; "
                f"delete the directory and rerun the wheelhouse step"
            )
        got = sha256_file(files[0])
        if got not in digests:
            raise ImageError(
                f"wheel hash mismatch: {files[0].name} has sha256 {got[:16]}..., not a hash "
                f"listed in {lock}; the wheelhouse is tampered or corrupt: delete "
                f"{wheelhouse} and rerun"
            )


def for_build(
    target: Target, wheelhouse: Optional[Path] = None, check_hashes: bool = True, log=sys.stderr
) -> Path:
    """The wheelhouse a build copies (default: wheelhouse/<release>-<platform>, where what it
    lacks is downloaded); with check_hashes, checked against the lock (offline when complete)."""
    default = wheelhouse is None
    wheelhouse = Path(wheelhouse) if wheelhouse else wheelhouse_dir(target.version, target.platform)
    if check_hashes:
        try:
            check_wheelhouse(target.lock, wheelhouse)
        except ImageError as e:
            if not (default and "lacks wheels" in str(e)):
                raise
            prepare_wheelhouse(target, wheelhouse, log=log)  # fetch what is missing
    return wheelhouse


def prepare_wheelhouse(target: Target, dest: Optional[Path] = None, log=sys.stderr) -> Path:
    """pip download the lock's wheels (hash-checked) for the image's interpreter (the release's
    image Python) and platform (its base suite's glibc)."""
    lock = target.lock
    dest = Path(dest) if dest else wheelhouse_dir(target.version, target.platform)
    dest.mkdir(parents=True, exist_ok=True)
    python, suite = target.release.image_python, target.release.base_suite
    abis = ["cp" + python.replace(".", ""), "abi3", "none"]
    image_python = ["--python-version", python, "--implementation", "cp"]
    image_python += [a for abi in abis for a in ("--abi", abi)]
    image_python += [a for tag in wheel_platforms(GLIBC_MINOR[suite]) for a in ("--platform", tag)]
    print(
        f"pax images: downloading {target.version}-{target.platform} wheels for CPython {python} "
        f"on {suite} into {dest}",
        file=log,
    )
    r = install.download(lock, dest, *image_python)
    if r.returncode != 0:
        out = r.stdout + r.stderr
        if any(m in out for m in HASH_MISMATCH_MARKERS):
            raise ImageError(
                f"wheel hash mismatch while downloading {lock}: a file in {dest} or "
                f"from the index does not match the lock; delete {dest} and rerun"
            )
        why = last_line(r.stderr, r.stdout, default="(no output)")
        raise ImageError(f"pip download for {lock} failed: {why}")
    check_wheelhouse(lock, dest)
    return dest
