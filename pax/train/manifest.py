"""The environment manifest: enough to trace a curve back to the environment that made it.

Which environment is pax.envinfo's answer: the identity file a pinned env or image carries
(found from sys.prefix, so a run started by nox, by the image, by a Slurm venv runtime or by
hand from `.venv/pax-<release>-<platform>/bin/python` records the same), PAX_RELEASE /
PAX_PLATFORM / PAX_LOCKFILE / PAX_LOCK_SHA256 overriding it, and the drift of the installed set
from the lock (or, unpinned, from the nearest release lock) under `env`.
"""

import importlib.metadata
import os
import platform
import sys

from pax import envinfo, git

HEADLINE_PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "tensorstore", "numpy")


def _git_revision():
    # Images have no .git: the build passes the revision in.
    return os.environ.get("PAX_GIT_REVISION") or git.revision()


def release_info(env: dict | None = None) -> dict:
    """The manifest's top-level identity fields; env is envinfo.describe()'s answer."""
    env = envinfo.describe() if env is None else env
    return {
        "release": env["release"],
        "lockfile": env["lockfile"],
        "lock_sha256": env["lock_sha256"],
        "image": os.environ.get("PAX_IMAGE"),
    }


def environment(devices, mesh, peak: dict, env: dict | None = None) -> dict:
    env = envinfo.describe() if env is None else env
    packages = {d.metadata["Name"].lower(): d.version for d in importlib.metadata.distributions()}
    return {
        **release_info(env),
        "env": env,
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
