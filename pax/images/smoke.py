"""The smoke run: the tiny experiment trained offline in the image, its job directory checked
(checkpoint, falling loss, a manifest naming the release and the lock sha256, its environment
exactly that lock where the image's pax records one)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterable, Optional

from pax.errors import last_line
from pax.images.engine import ImageError, docker, has_pax_env, require_image, verify_in_image
from pax.images.target import Target

SMOKE_EXPERIMENT = "tasks.lm.params.lm_cloud.LmCloudSpmdTiny"
SMOKE_STEPS = 20


def _strings(obj) -> Iterable[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _strings(v)


def check_job_dir(job: Path, release: str, lock_sha: str, env_state: bool = True) -> dict:
    """Checkpoint written, loss falling, manifest naming the release and the lock's sha256, and
    (env_state) its environment exactly that lock: a pax without pax.envinfo records no state."""
    ckpts = job / "checkpoints"
    steps = sorted(p.name for p in ckpts.iterdir()) if ckpts.is_dir() else []
    if not steps:
        raise ImageError(f"smoke: no checkpoint under {ckpts}")
    metrics_file = job / "metrics.jsonl"
    if not metrics_file.is_file():
        raise ImageError(f"smoke: no {metrics_file}")
    losses = []
    for line in metrics_file.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        if rec.get("split", "train") != "train":
            continue
        for key in ("loss", "train/loss", "train_loss"):
            if isinstance(rec.get(key), (int, float)):
                losses.append(float(rec[key]))
                break
    if len(losses) < 2:
        raise ImageError(f"smoke: {metrics_file} has {len(losses)} loss values; need at least 2")
    if not losses[-1] < losses[0]:
        raise ImageError(f"smoke: loss did not fall ({losses[0]:.4f} -> {losses[-1]:.4f})")
    manifest_file = job / "manifest.json"
    if not manifest_file.is_file():
        raise ImageError(f"smoke: no {manifest_file}")
    manifest = json.loads(manifest_file.read_text())
    state = (manifest.get("env") or {}).get("state")
    if env_state and state != "exact":
        raise ImageError(
            f"smoke: {manifest_file} says the image's environment is {state or 'unknown'}, "
            "not exactly its lock"
        )
    strings = set(_strings(manifest))
    if release not in strings:
        raise ImageError(f"smoke: {manifest_file} does not name release {release}")
    if not any(lock_sha in s for s in strings):
        raise ImageError(f"smoke: {manifest_file} does not name lock sha256 {lock_sha[:12]}...")
    return {"checkpoints": steps, "first_loss": losses[0], "last_loss": losses[-1]}


def smoke(
    target: Target,
    image: Optional[str] = None,
    steps: int = SMOKE_STEPS,
    keep: Optional[Path] = None,
    log=sys.stderr,
) -> dict:
    """Train the tiny experiment in the image (default target.tag), offline, and check its job
    directory."""
    image = require_image(image or target.tag, target.version, target.platform)
    verify_in_image(image)
    env_state = has_pax_env(image)
    out = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="pax-smoke-"))
    out.mkdir(parents=True, exist_ok=True)
    os.chmod(out, 0o777)  # the image runs as an unprivileged user
    try:
        t0 = time.monotonic()
        r = docker(
            "run",
            "--rm",
            "--network",
            "none",
            "-v",
            f"{out}:/out",
            image,
            f"--exp={SMOKE_EXPERIMENT}",
            "--job_log_dir=/out/job",
            f"--set=NUM_TRAIN_STEPS={steps}",
            f"--set=CHECKPOINT_EVERY_N_STEPS={steps}",
            check=False,
        )
        if r.returncode != 0:
            why = last_line(r.stderr, r.stdout)
            raise ImageError(f"smoke: {image} exited {r.returncode}: {why}")
        result = check_job_dir(out / "job", target.version, target.lock_sha256, env_state=env_state)
        result["seconds"] = round(time.monotonic() - t0, 1)
        print(
            f"pax images: smoke {image}: {len(result['checkpoints'])} checkpoint(s), loss "
            f"{result['first_loss']:.3f} -> {result['last_loss']:.3f}, {result['seconds']}s",
            file=log,
        )
        return result
    finally:
        if not keep:
            # Files were written by the container's user; remove them through the container too.
            docker(
                "run",
                "--rm",
                "--network",
                "none",
                "--user",
                "0",
                "-v",
                f"{out}:/out",
                "--entrypoint",
                "sh",
                image,
                "-c",
                "rm -rf /out/job",
                check=False,
            )
            shutil.rmtree(out, ignore_errors=True)
