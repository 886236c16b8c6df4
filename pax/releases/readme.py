"""Generated blocks in markdown files, so README's tables cannot drift from their sources.

A file opts in with a pair of markers; everything between them is replaced on each refresh:

    <!-- releases-table:start -->     the releases, from releases/*/release.toml
    <!-- releases-table:end -->

`./noxw -s readme` rewrites the releases blocks of README.md and releases/README.md (and
`./noxw -s release` does so before committing a release); tests/releases checks that the
committed blocks equal what this module renders. Other tools fill their own blocks with
`rewrite_text` (pax.tools.aot: the compile table).
"""

from __future__ import annotations

import re
from pathlib import Path

from pax.releases.catalog import REPO_ROOT, Release, list_releases

START = "<!-- releases-table:start -->"
END = "<!-- releases-table:end -->"
FILES = ("README.md", "releases/README.md")  # relative to the repo root
COLUMNS = (
    "release",
    "date",
    "branch",
    "jax / jaxlib",
    "flax",
    "optax",
    "orbax-checkpoint",
    "tensorstore",
    "Python",
)


class ReadmeError(ValueError):
    """A marked block that cannot be rewritten (unpaired or nested markers)."""


def _text(value) -> str:
    if value is None or value == "":
        return "—"
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def table_row(release: Release) -> list[str]:
    pins = release.pins
    jax = f"{_text(pins.get('jax'))} / {_text(pins.get('jaxlib'))}"
    return [
        release.version,
        _text(release.meta.get("date")),
        _text(release.meta.get("branch")),
        jax,
        *(_text(pins.get(n)) for n in ("flax", "optax", "orbax-checkpoint", "tensorstore")),
        release.python,
    ]


def render_table(releases: list[Release]) -> str:
    """The markdown table, newest release first; ends without a newline."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for release in sorted(
        releases, key=lambda r: tuple(int(p) for p in r.version.split(".")), reverse=True
    ):
        lines.append("| " + " | ".join(table_row(release)) + " |")
    return "\n".join(lines)


def releases_table(root: Path | None = None) -> str:
    return render_table(list_releases(root))


def _block_re(start: str, end: str) -> re.Pattern:
    return re.compile(re.escape(start) + r"(.*?)" + re.escape(end), re.S)


def blocks(text: str, start: str = START, end: str = END) -> list[str]:
    """The contents between each marker pair (as stored)."""
    return _block_re(start, end).findall(text)


def _check_markers(text: str, source: str, start: str, end: str) -> None:
    depth = 0
    for number, line in enumerate(text.splitlines(), 1):
        for marker in re.findall(re.escape(start) + "|" + re.escape(end), line):
            depth += 1 if marker == start else -1
            if depth not in (0, 1):
                what = "nested" if depth > 1 else "unpaired"
                raise ReadmeError(
                    f"{source}:{number}: {what} {marker}; markers come in {start} ... {end} pairs"
                )
    if depth:
        raise ReadmeError(f"{source}: {start} without {end}")


def rewrite_text(
    text: str, table: str, source: str = "<text>", start: str = START, end: str = END
) -> str:
    """Replace every marked block's contents by `table` (blank line either side)."""
    _check_markers(text, source, start, end)
    return _block_re(start, end).sub(lambda _: f"{start}\n\n{table}\n\n{end}", text)


def refresh(
    root: Path | None = None, files: tuple[str, ...] | list[str] = FILES, check: bool = False
) -> list[Path]:
    """Rewrite the marked blocks of `files` (missing files and files without markers are skipped).

    Returns the files whose text changed (with check=True: would change; nothing is written).
    """
    root = root or REPO_ROOT
    generated = [(releases_table(root), START, END)]
    changed = []
    for name in files:
        path = root / name
        if not path.is_file():
            continue
        text = path.read_text()
        new = text
        for table, start, end in generated:
            new = rewrite_text(new, table, str(path.relative_to(root)), start, end)
        if new != text:
            changed.append(path)
            if not check:
                path.write_text(new)
    return changed


def marked_files(root: Path | None = None, files=FILES) -> list[Path]:
    root = root or REPO_ROOT
    return [root / f for f in files if (root / f).is_file() and START in (root / f).read_text()]
