"""`./noxw -s verify -- RELEASE PLATFORM`: build a release's image twice, each from scratch, and
compare. The same image ID means the build reproduces; otherwise the report names the config
fields and the layers that differ, and in each layer the files, as Debian's diffoscope finds
them in the two layer tarballs."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from pax.errors import last_line
from pax.images import buildah
from pax.images.engine import ImageError

DIFFOSCOPE_TIMEOUT_S = 900
MAX_FILES = 20  # per layer, in the report


def tags() -> tuple[str, str]:
    """Names for one verify's two builds in buildah's store, its own: two verifies at once on
    one machine (two releases, two CI jobs) keep to their own images."""
    run = uuid.uuid4().hex[:12]
    return (f"localhost/pax-verify-{run}:a", f"localhost/pax-verify-{run}:b")


def _blob(layout: Path, digest: str) -> Path:
    algorithm, hexdigest = digest.split(":", 1)
    return layout / "blobs" / algorithm / hexdigest


def read_layout(layout: Path) -> tuple[dict, list[str]]:
    """An OCI layout's (config, layer digests) for its one image."""
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads(_blob(layout, index["manifests"][0]["digest"]).read_text())
    config = json.loads(_blob(layout, manifest["config"]["digest"]).read_text())
    return config, [layer["digest"] for layer in manifest["layers"]]


def differing_files(a: Path, b: Path) -> list[str]:
    """The members of two tarballs whose content or metadata differ (diffoscope --json)."""
    if shutil.which("diffoscope") is None:
        raise ImageError("no diffoscope on PATH; ci/image-tools.sh installs diffoscope-minimal")
    r = subprocess.run(
        ["diffoscope", "--no-progress", "--json", "-", str(a), str(b)],
        capture_output=True,
        text=True,
        timeout=DIFFOSCOPE_TIMEOUT_S,
    )
    if r.returncode == 0:
        return []
    try:
        report = json.loads(r.stdout)
    except json.JSONDecodeError:
        why = last_line(r.stderr, default=str(r.returncode))
        raise ImageError(f"diffoscope failed: {why}") from None
    return list(_members(report))


def _members(node: dict):
    """Member names under a diffoscope node, through the wrapper a compressed blob adds
    ("<name>-content"). "file list" is the listing itself (modes, owners, times), which
    diffoscope reports when only metadata differs."""
    for detail in node.get("details", []):
        name = detail["source1"]
        if name.endswith("-content") and "/" not in name:
            yield from _members(detail)
        else:
            yield name


def compare(a: Path, b: Path) -> list[str]:
    """Lines naming what differs between two OCI layouts (none when they are the same image)."""
    config_a, layers_a = read_layout(a)
    config_b, layers_b = read_layout(b)
    lines = [
        f"config {key}: {json.dumps(config_a.get(key))} vs {json.dumps(config_b.get(key))}"
        for key in sorted((set(config_a) | set(config_b)) - {"rootfs"})
        if config_a.get(key) != config_b.get(key)
    ]
    if len(layers_a) != len(layers_b):
        lines.append(f"layers: {len(layers_a)} vs {len(layers_b)}")
    for n, (la, lb) in enumerate(zip(layers_a, layers_b), start=1):
        if la == lb:
            continue
        files = differing_files(_blob(a, la), _blob(b, lb))
        shown = ", ".join(files[:MAX_FILES]) + (
            f" (+{len(files) - MAX_FILES})" if len(files) > MAX_FILES else ""
        )
        lines.append(f"layer {n} ({la[7:19]} vs {lb[7:19]}): {shown or 'no member differs'}")
    return lines


def compare_builds(ids: list[str], tagged: tuple[str, str]) -> None:
    """Nothing when the two builds (in buildah's store as `tagged`) gave one image ID; else
    ImageError naming the config fields, layers and files that differ."""
    if ids[0] == ids[1]:
        return
    with tempfile.TemporaryDirectory(prefix="pax-verify-") as tmp:
        a, b = (buildah.save(tag, Path(tmp) / name) for tag, name in zip(tagged, "ab"))
        differences = compare(a, b)
    raise ImageError(f"two builds gave {ids[0]} and {ids[1]}: " + "; ".join(differences or ["?"]))
