"""The Docker engine as the image code sees it: one `docker` call with one-line errors, image
lookups, and the in-image environment check."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Optional

from pax.errors import FAILURE, USAGE, PaxError, last_line

IMAGE_REPO = os.environ.get("PAX_IMAGE_REPO", "pax")
LOCK_IN_IMAGE = "/opt/pax/lock.txt"


class ImageError(PaxError):
    """One-line failure; `usage` marks bad input (exit 2)."""

    def __init__(self, message: str, usage: bool = False):
        super().__init__(message)
        self.usage = usage
        self.exit_code = USAGE if usage else FAILURE


def docker(
    *args: str, check: bool = True, capture: bool = True, timeout: Optional[float] = None
) -> subprocess.CompletedProcess:
    try:
        r = subprocess.run(["docker", *args], capture_output=capture, text=True, timeout=timeout)
    except FileNotFoundError:
        raise ImageError(
            "no docker command on PATH; install a Docker engine or run ci/docker-engine.sh start"
        ) from None
    if check and r.returncode != 0:
        why = last_line(r.stderr, r.stdout, default=f"exit {r.returncode}")
        raise ImageError(f"docker {args[0]} failed: {why}")
    return r


def require_engine() -> None:
    r = docker("info", "--format", "{{.ServerVersion}}", check=False)
    if r.returncode != 0 or not r.stdout.strip():
        raise ImageError(
            "no Docker engine answers (docker info failed); start one with "
            "ci/docker-engine.sh start"
        )


def image_exists(ref: str) -> bool:
    return docker("image", "inspect", ref, check=False).returncode == 0


def require_image(image: str, release: str, platform: str) -> str:
    """`image`, which the Docker engine must answer for and hold (else the build that makes it)."""
    require_engine()
    if not image_exists(image):
        raise ImageError(
            f"image {image} not found; build it with ./noxw -s build -- {release} {platform}"
        )
    return image


def image_size(ref: str) -> int:
    return int(docker("image", "inspect", "-f", "{{.Size}}", ref).stdout.strip())


def image_ref(release: str, platform: str) -> str:
    return f"{IMAGE_REPO}:{release}-{platform}"


def _run_python(image: str, *args: str) -> subprocess.CompletedProcess:
    return docker(
        "run", "--rm", "--network", "none", "--entrypoint", "python", image, *args, check=False
    )


_READ_BACK = (
    "import hashlib, sys\n"
    "data = open(sys.argv[1], 'rb').read()\n"
    "sys.stdout.write(hashlib.sha256(data).hexdigest() + '\\n' + data.decode())\n"
)


def read_labelled_file(image: str, path: str, label_name: str) -> tuple[str, str]:
    """(text, sha256) of a file in the image whose sha256, taken inside the image, must be the
    image's label `label_name` (the SBOM, the provenance statement)."""
    r = _run_python(image, "-c", _READ_BACK, path)
    if r.returncode != 0:
        raise ImageError(f"{image} has no readable {path}: {last_line(r.stderr, r.stdout)}")
    digest, _, text = r.stdout.partition("\n")
    want = label(image, label_name)
    if digest != want:
        raise ImageError(
            f"{image}: {path} has sha256 {digest[:12]}, its label {label_name} says "
            f"{want[:12] or '(none)'}"
        )
    return text, digest


def label(image: str, name: str, missing_ok: bool = False) -> str:
    """One OCI label of a local image ("" when it has none, or with missing_ok no such image)."""
    r = docker("image", "inspect", "-f", "{{json .Config.Labels}}", image, check=not missing_ok)
    return (json.loads(r.stdout) or {}).get(name, "") if r.returncode == 0 else ""


def has_pax_env(image: str) -> bool:
    """Whether the image's pax has `python -m pax env` (pax.envinfo): releases whose source
    predates it do not, and their runs' manifests carry no environment state."""
    probe = "import importlib.util as u, sys; sys.exit(u.find_spec('pax.envinfo') is None)"
    return _run_python(image, "-c", probe).returncode == 0


def verify_in_image(image: str) -> str:
    """The image's own environment checks: installed set == baked-in lock
    (verify_image_env.py, the recipe's, for every release), and where the image's pax has it,
    `python -m pax env` naming the lock the image's label names, exactly (what every run's
    manifest.json will record)."""
    r = _run_python(image, "/opt/pax/verify_image_env.py")
    if r.returncode != 0:
        raise ImageError(
            f"in-image verification of {image} failed: {last_line(r.stderr, r.stdout)}"
        )
    if not has_pax_env(image):
        return f"{r.stdout.strip()}\npax env: not in this image's pax (its source predates it)"
    env = _run_python(image, "-m", "pax", "env", "--json")
    try:
        desc = json.loads(env.stdout)
    except json.JSONDecodeError:
        why = last_line(env.stderr, env.stdout, default=str(env.returncode))
        raise ImageError(f"`python -m pax env` in {image} failed: {why}") from None
    want = label(image, "io.pax.lock.sha256")
    if env.returncode != 0 or desc["state"] != "exact" or desc["notes"]:
        rows = ", ".join(
            f"{d['package']} {d['locked']} -> {d['installed']}" for d in desc["differences"] or []
        )
        raise ImageError(
            f"`python -m pax env` in {image}: {desc['state']} {rows} {'; '.join(desc['notes'])}"
        )
    if desc["identity"] is None or desc["lock_sha256"] != want:
        raise ImageError(
            f"`python -m pax env` in {image} names lock sha256 {desc['lock_sha256']} (identity "
            f"{desc['identity']}), the label io.pax.lock.sha256 {want or '(none)'}"
        )
    return (
        f"{r.stdout.strip()}\npax env: release {desc['release']} {desc['platform']}, exact, "
        f"identity {desc['identity']}"
    )
