"""What a cut release holds fixed, so that its recorded image IDs never move.

A release cut from 1.8.0 on says `image_recipe = "source"` in its release.toml: its images are
built by its own tree, not by this checkout. The build exports the image code of the release's
source commit (`git archive`: the Dockerfiles, the in-image check, pax with its lock reader,
context, SBOM and provenance writers, and its tools lock), makes an interpreter of the SBOM
library, setuptools and pip at that tools lock's pins, and runs the tree's own
`python -m pax.images.stage` there; this checkout only fetches the wheels (fixed by the lock's
hashes) and runs buildah. Later changes to this checkout's image code leave such a release's
image as it was. Releases cut before are built by this checkout's recipe.

Any release whose [images] records a base and a builder is built only on that base (by ID) with
that buildah: otherwise the build is refused, naming both, rather than giving another image.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from pax import lockfile, pip
from pax.environments import install
from pax.errors import last_line
from pax.images.context import Context
from pax.images.engine import IMAGE_REPO, ImageError
from pax.images.target import Target
from pax.paths import ROOT
from pax.releases import source

TOOLS_LOCK = "requirements/tools.txt"
# What the tree's staging imports beyond the standard library: the SBOM library and packaging
# (the SBOM's dependency graph), and the build backend and pip its pax wheel is built with.
# Their dependencies come from the lock's "# via".
TOOL_ROOTS = ("cyclonedx-python-lib", "packaging", "setuptools", "pip")
TREE_PATHS = (
    *source.PACKAGE_PATHS,
    "Dockerfile.tpu",
    "Dockerfile.gpu",
    "ci/verify_image_env.py",
    TOOLS_LOCK,
    "releases",
)
BASE_REPO = f"{IMAGE_REPO}-base"  # where publish pushes the base, tagged by its ID's hex


def base_ref(registry: str, base_id: str) -> str:
    """Where publish puts a base in a registry: REGISTRY/pax-base:<its ID's hex>."""
    return f"{registry}/{BASE_REPO}:{base_id.removeprefix('sha256:')}"


def require_recorded(target: Target, base_id: str, builder: str) -> None:
    """Nothing when the release records no base, for a dev build, or when the base's ID and the
    builder are the recorded ones; else ImageError naming both and how to get the recorded."""
    want = target.release.meta.get("images", {})
    if target.dev or "base_id" not in want:
        return
    version = target.version
    if base_id != want["base_id"]:
        raise ImageError(
            f"release {version} records base {want['base_id']} (Debian "
            f"{want.get('base_debian_version')}), but {target.base_image} is {base_id}: a build "
            "there would not be the recorded image; bring the recorded base back with "
            "ci/base-image.sh --load FILE (an archive ci/base-image.sh --save wrote) or pass "
            f"--base-image {base_ref('REGISTRY', want['base_id'])} (publish pushes it there)"
        )
    if f"buildah {builder}" != want.get("builder"):
        raise ImageError(
            f"release {version} records its images as built by {want.get('builder')}, this "
            f"machine has buildah {builder}: a build would not be the recorded image; install "
            f"{want.get('builder')} (Debian bookworm's buildah package)"
        )


def required_by(lock_text: str) -> dict[str, set[str]]:
    """{package: the names pip-compile's "# via" lines give for it} of a lockfile."""
    via: dict[str, set[str]] = {}
    name, listing = None, False
    for line in lock_text.splitlines():
        pin = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==", line)
        text = line.strip()
        if pin:
            name, listing = lockfile.canonicalize(pin[1]), False
            via[name] = set()
        elif name and text.startswith("# via"):
            rest = text.removeprefix("# via").strip()
            listing = not rest
            if rest:
                via[name].add(lockfile.canonicalize(rest))
        elif name and listing and text.startswith("#   "):
            via[name].add(lockfile.canonicalize(text.removeprefix("#").strip()))
        else:
            listing = False
    return via


def tool_pins(lock_text: str, roots=TOOL_ROOTS) -> list[lockfile.Pin]:
    """The pins of `roots` and of everything they need, as the tools lock records it."""
    pins = lockfile.parse_lockfile_text(lock_text, TOOLS_LOCK)
    missing = [r for r in roots if r not in pins]
    if missing:
        raise ImageError(f"the release's {TOOLS_LOCK} pins no {', '.join(missing)}")
    via, needed = required_by(lock_text), set(roots)
    while grown := {n for n, by in via.items() if n not in needed and by & needed}:
        needed |= grown
    return [pins[n] for n in sorted(needed)]


def tools_python(tree: Path) -> Path:
    """An interpreter holding exactly the tree's tool pins (hash-checked), made once per pin
    set under ~/.cache/pax/image-tools."""
    pins = tool_pins((tree / TOOLS_LOCK).read_text())
    lines = "".join(install.requirement_line(p) + "\n" for p in pins)
    venv = pip.user_cache_dir("image-tools") / hashlib.sha256(lines.encode()).hexdigest()[:16]
    python, done = venv / "bin" / "python", venv / "pax-tools.txt"
    if done.is_file() and done.read_text() == lines:
        return python
    try:
        pip.make_venv(venv)
        requirements = venv / "requirements.txt"
        requirements.write_text(lines)
        install.install_lock(python, requirements)
    except subprocess.CalledProcessError as e:
        why = last_line(e.stderr, e.stdout, default=str(e.returncode))
        raise ImageError(f"installing the release's image tools failed: {why}") from None
    done.write_text(lines)
    return python


@contextlib.contextmanager
def staged(
    target: Target,
    tag: str,
    wheels: Path,
    base_id: str,
    builder: str,
    verify_hashes: bool = True,
    log=sys.stderr,
) -> Iterator[Context]:
    """The build context as the release's own tree lays it out, in a temporary folder."""
    rev = target.source.revision
    with tempfile.TemporaryDirectory(prefix="pax-frozen-") as tmp:
        tree, out = Path(tmp) / "tree", Path(tmp) / "stage"
        source.export(rev, tree, paths=TREE_PATHS, root=ROOT)
        command = [str(tools_python(tree)), "-m", "pax.images.stage"]
        command += [f"--release={target.version}", f"--platform={target.platform}"]
        command += [f"--revision={rev}", f"--epoch={target.source.epoch}", f"--tag={tag}"]
        command += [f"--wheelhouse={wheels.resolve()}", f"--base-id={base_id}"]
        command += [f"--builder-version={builder}", f"--out={out}"]
        command += [] if verify_hashes else ["--no-verify-hashes"]
        env = {k: v for k, v in os.environ.items() if k not in ("PAX_RELEASES_DIR", "PYTHONPATH")}
        r = subprocess.run(
            command, cwd=tree, env={**env, "PYTHONPATH": str(tree)}, capture_output=True, text=True
        )
        log.write(r.stderr if r.returncode == 0 else "")
        if r.returncode != 0:
            why = last_line(r.stderr, r.stdout, default=str(r.returncode))
            raise ImageError(
                f"release {target.version}'s own tree ({rev[:12]}) could not stage its "
                f"{target.platform} image: {why.removeprefix('pax images stage: error: ')}"
            )
        laid = json.loads(r.stdout)
        yield Context(out / "context", Path(laid["dockerfile"]), laid["args"], laid["epoch"], tag)
