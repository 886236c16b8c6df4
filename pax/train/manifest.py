"""The environment manifest: enough to trace a curve back to the environment that made it.

The release and its lockfile come from PAX_RELEASE / PAX_LOCKFILE, which the nox sessions and
the images set when they install from a release lock; the lock's sha256 is recomputed here.
"""

import hashlib
import importlib.metadata
import os
import platform
import sys

from pax import git

HEADLINE_PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "tensorstore", "numpy")


def _git_revision():
    # Images have no .git: the build passes the revision in.
    return os.environ.get("PAX_GIT_REVISION") or git.revision()


def release_info() -> dict:
    lockfile = os.environ.get("PAX_LOCKFILE")
    info = {
        "release": os.environ.get("PAX_RELEASE"),
        "lockfile": lockfile,
        "lock_sha256": None,
        "image": os.environ.get("PAX_IMAGE"),
    }
    if lockfile and os.path.isfile(lockfile):
        with open(
            lockfile, "rb"
        ) as f:  # not pax.releases: the trainer imports no distribution code
            info["lock_sha256"] = hashlib.file_digest(f, "sha256").hexdigest()
    return info


def environment(devices, mesh, peak: dict) -> dict:
    packages = {d.metadata["Name"].lower(): d.version for d in importlib.metadata.distributions()}
    return {
        **release_info(),
        "git_revision": _git_revision(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "headline_packages": {name: packages.get(name) for name in HEADLINE_PACKAGES},
        "packages": dict(sorted(packages.items())),
        "devices": {
            "platform": devices[0].platform,
            "device_kind": devices[0].device_kind,
            "count": len(devices),
            "process_count": len({d.process_index for d in devices}),
        },
        "mesh": dict(mesh.shape),
        "peak_flops": peak,
    }
