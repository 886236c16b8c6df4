"""In-image environment check: the venv holds exactly the baked-in lock, plus pax.

Copied into the image as /opt/pax/verify_image_env.py; runs at build time (after pip check)
and after a pull (`docker run --entrypoint python IMAGE /opt/pax/verify_image_env.py`).
Reads the lock and the installed set with the recipe's pax.lockfile, copied beside it as
/opt/pax/pax_lockfile.py: a release's own pax may predate that module (the images of releases
cut before it pack an older tree), and the check is the recipe's, whatever the release.
Prints one `pax-verify: ok ...` line, or `pax-verify: ERROR ...` lines and exits 1.
"""

import hashlib
import os
import sys

try:  # the recipe's reader of locks and names, beside this script in the image
    import pax_lockfile as lockfile
except ImportError:
    try:  # run from a checkout: its own pax
        from pax import lockfile
    except ImportError as e:  # pragma: no cover - neither
        print(f"pax-verify: ERROR no lock reader (pax_lockfile.py, pax.lockfile): {e}")
        sys.exit(1)


def main():
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
    for name, found in sorted(lockfile.installed_twice().items()):
        if len(set(found)) > 1:
            errors.append(f"{name} installed twice ({', '.join(found)})")
    have = lockfile.installed()
    pax_version = have.get("pax")
    if pax_version is None:
        errors.append("pax is not installed")
    errors += [lockfile.difference_text(row) for row in lockfile.differences(have, pins)]
    if errors:
        for e in errors:
            print(f"pax-verify: ERROR {e}")
        return 1
    print(
        f"pax-verify: ok release {os.environ.get('PAX_RELEASE', '?')}: {len(pins)} packages match "
        f"lock sha256 {digest[:12]}, plus pax {pax_version}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
