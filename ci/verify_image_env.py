"""In-image environment check: the venv holds exactly the baked-in lock, plus pax.

Copied into the image as /opt/pax/verify_image_env.py; runs at build time (after pip check)
and after a pull (`docker run --entrypoint python IMAGE /opt/pax/verify_image_env.py`).

A recipe may leave packages of the lock out of its image (Dockerfile.gpu says which and why):
`verify_image_env.py --leave-out NAME...` removes each, which must be installed at its locked
version, file by file as its RECORD lists them (what `pip uninstall` removes), and records the
names as `left_out` in the env's identity file (/opt/venv/pax-env.json, which `python -m pax
env` and every run's manifest read); the check then wants exactly the lock without them.
Reads the lock and the installed set with the recipe's pax.lockfile, copied beside it as
/opt/pax/pax_lockfile.py: a release's own pax may predate that module (the images of releases
cut before it pack an older tree), and the check is the recipe's, whatever the release.
Prints one `pax-verify: ok ...` line, or `pax-verify: ERROR ...` lines and exits 1.
"""

import hashlib
import importlib.metadata
import json
import os
import sys
from pathlib import Path

try:  # the recipe's reader of locks and names, beside this script in the image
    import pax_lockfile as lockfile
except ImportError:
    try:  # run from a checkout: its own pax
        from pax import lockfile
    except ImportError as e:  # pragma: no cover - neither
        print(f"pax-verify: ERROR no lock reader (pax_lockfile.py, pax.lockfile): {e}")
        sys.exit(1)


IDENTITY = Path(sys.prefix) / "pax-env.json"


def left_out() -> list[str]:
    """The names the identity file says the image was built without."""
    if not IDENTITY.is_file():
        return []
    return list(json.loads(IDENTITY.read_text()).get("left_out", []))


def leave_out(names: list[str], pins: dict[str, str]) -> list[str]:
    """Remove the named packages the lock pins (each at its locked version) and record them in
    the identity file; the errors, where nothing was removed. A name the lock does not pin is
    passed over (NVIDIA's wheels are named per CUDA major: nvidia-cusolver-cu12 in a CUDA 12
    lock, nvidia-cusolver in a CUDA 13 one), but one of the names at least must be pinned, so a
    rename cannot make the removal silently do nothing."""
    if not IDENTITY.is_file():
        return [f"--leave-out records what it removes in {IDENTITY}, which is not there"]
    pinned = [name for name in names if name in pins]
    if not pinned:
        return [f"--leave-out {' '.join(names)}: the lock pins none of them"]
    dists = {}
    for name in pinned:
        try:
            dists[name] = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            return [f"--leave-out {name}: not installed"]
        if pins.get(name) != dists[name].version:
            return [
                f"--leave-out {name}: the lock pins {pins.get(name)}, not {dists[name].version}"
            ]
    for dist in dists.values():
        root = Path(dist.locate_file(""))
        files = [Path(dist.locate_file(f)) for f in dist.files or []]
        for path in files:
            path.unlink(missing_ok=True)
        # the package's folders and theirs, deepest first, where nothing else is left in them
        folders = {d for p in files for d in p.parents if root in d.parents}
        for folder in sorted(folders, key=lambda p: -len(p.parts)):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    body = json.loads(IDENTITY.read_text())
    body["left_out"] = sorted(set(body.get("left_out", [])) | set(pinned))
    IDENTITY.write_text(json.dumps(body, indent=1) + "\n")
    return []


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    errors = []
    lock_file = os.environ.get("PAX_LOCKFILE", "/opt/pax/lock.txt")
    data = open(lock_file, "rb").read()
    digest = hashlib.sha256(data).hexdigest()
    want_digest = os.environ.get("PAX_LOCK_SHA256", "")
    if want_digest != digest:
        errors.append(
            f"{lock_file} has sha256 {digest}, PAX_LOCK_SHA256 says {want_digest or '(unset)'}"
        )
    if sys.prefix == sys.base_prefix:
        errors.append(f"{sys.executable} is not a virtual environment")
    try:
        pins = lockfile.lock_versions(data.decode(), lock_file)
    except lockfile.LockfileError as e:
        print(f"pax-verify: ERROR cannot read the lock: {e}")
        return 1
    if argv[:1] == ["--leave-out"]:
        errors += leave_out([lockfile.canonicalize(n) for n in argv[1:]], pins)
    elif argv:
        errors.append(f"usage: verify_image_env.py [--leave-out NAME...], not {' '.join(argv)}")
    gone = left_out()
    for name, found in sorted(lockfile.installed_twice().items()):
        if len(set(found)) > 1:
            errors.append(f"{name} installed twice ({', '.join(found)})")
    have = lockfile.installed()
    pax_version = have.get("pax")
    if pax_version is None:
        errors.append("pax is not installed")
    rows = lockfile.differences(have, pins, left_out=gone)
    errors += [lockfile.difference_text(row) for row in rows]
    if errors:
        for e in errors:
            print(f"pax-verify: ERROR {e}")
        return 1
    print(
        f"pax-verify: ok release {os.environ.get('PAX_RELEASE', '?')}: {len(pins) - len(gone)} "
        f"packages match"
        f" lock sha256 {digest[:12]}, plus pax {pax_version}"
        + (f"; left out: {', '.join(gone)}" if gone else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
