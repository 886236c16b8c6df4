"""The environment manifest: enough to trace a curve back to the environment that made it.

A job directory's manifest.json holds, at its top level, the environment that started the run
(what readers that know one environment read), and under `segments` the run's history: one entry
per stretch of it that one environment trained (or evaluated), from the step it started at. A
run's steps after `from_step` and up to the next segment's were trained by that segment's
environment (metrics.jsonl keeps the later row of a retrained step). Resuming under another
release or lock is refused unless asked for (`check_resume`), so nothing is ever relabelled.

Which environment is pax.envinfo's answer: the identity file a pinned env or image carries
(found from sys.prefix, so a run started by nox, by the image, by a Slurm venv runtime or by
hand from `.venv/pax-<release>-<platform>/bin/python` records the same), PAX_RELEASE /
PAX_PLATFORM / PAX_LOCKFILE / PAX_LOCK_SHA256 overriding it, and the drift of the installed set
from the lock (or, unpinned, from the nearest release lock) under `env`.

`xla_flags` holds the XLA_FLAGS and LIBTPU_INIT_ARGS the process started with (null where
unset): XLA's options change what a run computes (which kernels, which fusions, FP8 GEMMs or
not), and neither the lock nor the image fixes them.
"""

import datetime
import importlib.metadata
import json
import os
import platform
import sys

from pax import envinfo, git
from pax.errors import UsageError

FILE = "manifest.json"
# The flag that lets a run continue under another release or lock (pax.main defines it).
ALLOW_FLAG = "--allow_env_change"

# The variables XLA reads its options from: every backend's, and libtpu's on a TPU.
XLA_VARIABLES = ("XLA_FLAGS", "LIBTPU_INIT_ARGS")
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
    metadata = [d.metadata for d in importlib.metadata.distributions()]  # each parsed once
    packages = {m["Name"].lower(): m["Version"] for m in metadata}
    return {
        **release_info(env),
        "env": env,
        "git_revision": _git_revision(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "headline_packages": {name: packages.get(name) for name in HEADLINE_PACKAGES},
        "packages": dict(sorted(packages.items())),
        "xla_flags": {name: os.environ.get(name) for name in XLA_VARIABLES},
        "devices": {
            "platform": devices[0].platform,
            "device_kind": devices[0].device_kind,
            "count": len(devices),
            "process_count": len({d.process_index for d in devices}),
        },
        "mesh": dict(mesh.shape),
        "peak_flops": peak,
    }


# A segment's fields that are not its environment: runs that agree on all the others ran in one.
_PER_START = ("mode", "from_step", "started", "peak_flops")


def segment(described: dict, mode: str, from_step: int) -> dict:
    """One stretch of a run's life: the environment (environment()'s answer) that trained
    (mode 'train') or evaluated ('eval') its steps from `from_step` on."""
    env = described["env"]
    return {
        "mode": mode,
        "from_step": from_step,
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "release": described["release"],
        "platform": env.get("platform"),
        "lockfile": described["lockfile"],
        "lock_sha256": described["lock_sha256"],
        "image": described["image"],
        "git_revision": described["git_revision"],
        "python": described["python"],
        "env_state": env["state"],
        "differences": env["differences"],
        "headline_packages": described["headline_packages"],
        "xla_flags": described["xla_flags"],
        "devices": described["devices"],
        "mesh": described["mesh"],
        "peak_flops": described["peak_flops"],
    }


def segments(manifest: dict | None) -> list[dict]:
    """The run's history; a manifest written before segments were kept is one segment from 0."""
    if not manifest:
        return []
    if isinstance(manifest.get("segments"), list) and manifest["segments"]:
        return manifest["segments"]
    env = manifest.get("env") or {}
    return [
        {
            "mode": "train",
            "from_step": 0,
            **{k: manifest.get(k) for k in ("release", "lockfile", "lock_sha256", "image")},
            "platform": env.get("platform") or (manifest.get("devices") or {}).get("platform"),
            **{k: manifest.get(k) for k in ("git_revision", "python", "devices", "mesh")},
        }
    ]


def read(job_dir: str) -> dict | None:
    """job_dir's manifest.json, or None when it has none; UsageError when it is not JSON."""
    path = os.path.join(job_dir, FILE)
    try:
        with open(path) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise UsageError(
            f"{path} is not JSON ({e}); it records which environments trained this job "
            "directory: restore it, or use a new --job_log_dir"
        ) from None
    return manifest if isinstance(manifest, dict) else None


def release_name(seg: dict) -> str:
    """'release 1.7.0 cpu', or what an environment of no release is."""
    if seg.get("release") is None:
        return "an environment of no release"
    return f"release {seg['release']} {seg.get('platform') or '?'}"


def name(seg: dict) -> str:
    """'release 1.7.0 cpu (lock 0511fed8eece)', as the refusal and compare say it."""
    return f"{release_name(seg)} (lock {(seg.get('lock_sha256') or '?')[:12]})"


def check_resume(job_dir: str, manifest: dict | None, step: int, env: dict, allow: bool) -> None:
    """UsageError when job_dir's run, to be resumed from `step`, was last trained under another
    release or lock than `env` (envinfo.describe()'s answer), unless `allow`."""
    history = segments(manifest)
    if not history or allow:
        return
    last = history[-1]
    now = {
        "release": env["release"],
        "platform": env["platform"],
        "lock_sha256": env["lock_sha256"],
    }
    if (last.get("release"), last.get("lock_sha256")) == (now["release"], now["lock_sha256"]):
        return
    raise UsageError(
        f"{job_dir} was trained up to step {step} on {name(last)}; this is {name(now)}; nothing "
        f"was changed. Resume it on {release_name(last)}, use a new --job_log_dir, or add "
        f"{ALLOW_FLAG} to continue it here (recorded in its {FILE} as a new segment)"
    )


def with_segment(manifest: dict | None, described: dict, mode: str, from_step: int):
    """The manifest to write for a run starting (from_step 0) or resuming here, or None when
    the environment is the one that last ran it (nothing to record)."""
    new = segment(described, mode, from_step)
    history = segments(manifest)
    if manifest is None or (from_step == 0 and mode == "train"):
        # A run trained from its first step again: every step is retrained, so the history
        # starts over with it.
        return {**described, "segments": [new]}
    if _same(history[-1], new) and (mode == "eval" or history[-1].get("mode") == mode):
        return None  # evaluating in the environment that ran it last is no new stretch of life
    return {**manifest, "segments": [*history, new]}


def _same(a: dict, b: dict) -> bool:
    keys = (a.keys() | b.keys()) - set(_PER_START)
    return all(a.get(k) == b.get(k) for k in keys)
