"""Where the checkout's parts are: its root and its releases folder. Standard library only,
so every layer (and the noxfile, which puts ROOT on sys.path itself) finds them here."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent  # the checkout (or, for an installed pax, site-packages)
TOOLS_VENV = ROOT / ".tools" / "venv"  # ./noxw's venv: nox, pip-tools, uv, ruff


def releases_dir(root: Path | None = None) -> Path:
    """The releases folder: `root`'s releases/ when given; else $PAX_RELEASES_DIR, this
    checkout's releases/, or the locks an installed pax carries (pax/_releases, written by
    pax.images.build), the first that exists (the checkout's when none does)."""
    if root is not None:
        return Path(root) / "releases"
    override = os.environ.get("PAX_RELEASES_DIR")
    for candidate in (override, ROOT / "releases", PACKAGE / "_releases"):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return ROOT / "releases"
