"""In-image environment check: the venv holds exactly the baked-in lock, plus pax.

Copied into the image as /opt/pax/verify_image_env.py; runs at build time (after pip check)
and after a pull (`docker run --entrypoint python IMAGE /opt/pax/verify_image_env.py`).
Stdlib only. Prints one `pax-verify: ok ...` line, or `pax-verify: ERROR ...` lines and exits 1.
"""

import hashlib
import importlib.metadata
import os
import re
import sys


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text):
    pins = {}
    for line in text.replace("\\\n", " ").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        req = line.split("--hash=")[0].split(";", 1)[0].strip()
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*===?\s*(\S+)", req)
        if not m:
            raise SystemExit(f"pax-verify: ERROR cannot read lock line {line!r}")
        pins[normalize(m.group(1))] = m.group(3)
    return pins


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
    pins = parse_lock(data.decode())
    installed = {}
    for dist in importlib.metadata.distributions():
        name = normalize(dist.metadata["Name"] or "")
        if name in installed and installed[name] != dist.version:
            errors.append(f"{name} installed twice ({installed[name]}, {dist.version})")
        installed[name] = dist.version
    pax_version = installed.pop("pax", None)
    if pax_version is None:
        errors.append("pax is not installed")
    for name in sorted(set(pins) - set(installed)):
        errors.append(f"{name}=={pins[name]} is in the lock but not installed")
    for name in sorted(set(installed) - set(pins)):
        errors.append(f"{name}=={installed[name]} is installed but not in the lock")
    for name in sorted(set(pins) & set(installed)):
        if pins[name] != installed[name]:
            errors.append(f"{name}: lock pins {pins[name]}, installed {installed[name]}")
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
