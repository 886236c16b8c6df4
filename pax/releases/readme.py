"""Generated blocks in markdown files, so the docs' tables cannot drift from their sources.

A file opts in with a pair of markers; everything between them is replaced on each refresh:

    <!-- releases-table:start -->     the releases, from releases/*/release.toml
    <!-- releases-table:end -->
    <!-- support-matrix:start -->     per release: Python, jax, libtpu, CUDA wheels, images and
    <!-- support-matrix:end -->       who builds them, read from release.toml and the lockfiles
    <!-- changelog-pins:1.6.0:start -->   one release's pins and what moved in its locks against
    <!-- changelog-pins:1.6.0:end -->     the release before it (CHANGELOG.md)

`./noxw -s readme` rewrites these blocks (and those pax.docs adds: the GPU XLA flags, the
reference band) in README.md, releases/README.md, CHANGELOG.md, docs/*.md and Dockerfile.gpu;
`./noxw -s release` does so before committing a release; tests/releases and tests/docs check that
the committed blocks equal what is rendered now. Other tools fill their own blocks with
`rewrite_text` (pax.aot: the compile table; benchmarks/table.py: the bench table).

The pages a newcomer starts from (NEWEST_PAGES) name the newest release in their commands
(`./noxw -s train -- 1.7.0 tpu`, `.venv/pax-1.7.0-cpu`, `pax:1.7.0-gpu`): a refresh rewrites
each such release number to the newest cut release, so a cut moves them along.
"""

from __future__ import annotations

import re
from pathlib import Path

from pax import paths
from pax.errors import PaxError
from pax.lockfile import parse_lockfile, versions
from pax.releases.catalog import IMAGE_PLATFORMS, LOCK_PLATFORMS, Release, list_releases
from pax.releases.source import builds_own_images

START = "<!-- releases-table:start -->"
END = "<!-- releases-table:end -->"
MATRIX_START = "<!-- support-matrix:start -->"
MATRIX_END = "<!-- support-matrix:end -->"
# Relative to the repo root; docs/*.md are added by `all_files`.
FILES = ("README.md", "releases/README.md", "CHANGELOG.md", "Dockerfile.gpu")
NEWEST_PAGES = (
    "README.md",
    "docs/parallelism.md",
    "docs/decoding.md",
    "docs/fp8-gpu.md",
    "docs/reproducibility.md",
    "docs/troubleshooting.md",
)
# A release in a command: a session's RELEASE word, a pinned env, an image, the GPU check, a
# release's folder. Group 2 is the release.
_RELEASE_IN_COMMAND = re.compile(
    r"(\./noxw -s \w+ -- |\bpax-|\bpax:|ci/gpu_check\.sh |\breleases/)"
    r"(\d+\.\d+\.\d+)(?=[-/ `\n]|$)",
    re.M,
)
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


class ReadmeError(PaxError, ValueError):
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
        ", ".join(release.pythons),
    ]


def _newest_first(releases: list[Release]) -> list[Release]:
    return sorted(releases, key=lambda r: tuple(int(p) for p in r.version.split(".")), reverse=True)


def render_table(releases: list[Release]) -> str:
    """The markdown table, newest release first; ends without a newline."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for release in _newest_first(releases):
        lines.append("| " + " | ".join(table_row(release)) + " |")
    return "\n".join(lines)


def lock_versions(release: Release, platform: str) -> dict[str, str]:
    """name -> version of one of the release's lockfiles ({} when it has none)."""
    path = release.lockfile(platform)
    return versions(parse_lockfile(path)) if path.is_file() else {}


MATRIX_COLUMNS = (
    "release",
    "Python",
    "jax / jaxlib",
    "CPU",
    "TPU: libtpu",
    "GPU: jax CUDA plugin, CUDA runtime, cuDNN, cuBLAS",
    "images (built locally)",
    "image recipe",
)


def matrix_row(release: Release) -> list[str]:
    """What each platform of a release runs on, as its lockfiles pin it."""
    cpu, tpu, gpu = (lock_versions(release, p) for p in LOCK_PLATFORMS)
    cpu_cell = f"{cpu['jax']} / {cpu['jaxlib']}" if "jax" in cpu else "—"
    # Each by its CUDA 13 name or its CUDA 12 one, whichever the lock pins.
    gpu_cell = ", ".join(
        next((gpu[name] for name in names if name in gpu), "—")
        for names in (
            ("jax-cuda13-plugin", "jax-cuda12-plugin"),
            ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12"),
            ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12"),
            ("nvidia-cublas", "nvidia-cublas-cu12"),
        )
    )
    images = ", ".join(f"`pax:{release.version}-{p}`" for p in IMAGE_PLATFORMS)
    return [
        release.version,
        ", ".join(release.pythons),
        cpu_cell,
        f"`releases/{release.version}/cpu.txt`" if cpu else "—",
        tpu.get("libtpu", "—"),
        gpu_cell if gpu else "—",
        images,
        image_recipe(release),
    ]


def image_recipe(release: Release) -> str:
    """Who builds the release's images: its own tree (frozen, the recorded IDs hold for good), or
    today's checkout (the IDs follow its recipe)."""
    if builds_own_images(release):
        return "frozen: its own tree"
    return "today's recipe"


def render_matrix(releases: list[Release]) -> str:
    """The support matrix, newest release first; ends without a newline."""
    lines = ["| " + " | ".join(MATRIX_COLUMNS) + " |", "|" + "---|" * len(MATRIX_COLUMNS)]
    lines += ["| " + " | ".join(matrix_row(r)) + " |" for r in _newest_first(releases)]
    return "\n".join(lines)


def support_matrix(root: Path | None = None) -> str:
    return render_matrix(list_releases(root))


def _all_versions(release: Release) -> dict[str, str]:
    """Every package any of the release's locks pins (the cpu lock's version first)."""
    merged: dict[str, str] = {}
    for platform in LOCK_PLATFORMS:
        for name, version in lock_versions(release, platform).items():
            merged.setdefault(name, version)
    return merged


def changelog_markers(version: str) -> tuple[str, str]:
    return f"<!-- changelog-pins:{version}:start -->", f"<!-- changelog-pins:{version}:end -->"


def render_pins_change(release: Release, before: Release | None) -> str:
    """A release's headline pins and what its locks changed against the release before it (all
    platforms' locks together); ends without a newline."""
    headline = ", ".join(f"{k} {v}" for k, v in release.pins.items())
    lines = [f"Headline pins: {headline}."]
    new = _all_versions(release)
    if before is None:
        lines.append(f"First release: {len(new)} packages locked.")
        return "\n".join(lines)
    old = _all_versions(before)
    moved = [n for n in sorted(new) if n in old and old[n] != new[n]]
    added = [n for n in sorted(new) if n not in old]
    removed = [n for n in sorted(old) if n not in new]
    lines.append(
        f"Against {before.version}, its {', '.join(LOCK_PLATFORMS)} locks together: "
        f"{len(moved)} changed, {len(added)} added, {len(removed)} "
        f"removed (`./noxw -s diff -- {before.version} {release.version}`, and "
        "`--platform tpu` or `gpu` for those locks)."
    )
    if moved:
        lines += ["", f"| package | {before.version} | {release.version} |", "|---|---|---|"]
        lines += [f"| {n} | {old[n]} | {new[n]} |" for n in moved]
    for word, names, source in (("Added", added, new), ("Removed", removed, old)):
        if names:
            lines += ["", f"{word}: " + ", ".join(f"{n} {source[n]}" for n in names) + "."]
    return "\n".join(lines)


def changelog_blocks(root: Path | None = None) -> list[tuple[str, str, str]]:
    """One (text, start, end) per release: CHANGELOG.md's section of each holds its block."""
    ordered = _newest_first(list_releases(root))
    return [
        (render_pins_change(release, before), *changelog_markers(release.version))
        for release, before in zip(ordered, [*ordered[1:], None])
    ]


def add_changelog_section(root: Path | None = None, version: str = "") -> bool:
    """Give a new release its CHANGELOG.md section (a heading and its pins block) above the
    newest release's; False when the file is missing or the section is there already."""
    path = (root or paths.ROOT) / "CHANGELOG.md"
    if not path.is_file():
        return False
    text = path.read_text()
    start, end = changelog_markers(version)
    if start in text:
        return False
    section = f"## {version}\n\n{start}\n{end}\n\n"
    match = re.search(r"^## \d", text, re.M)
    at = match.start() if match else len(text)
    path.write_text(text[:at] + section + text[at:])
    return True


def generated(root: Path | None = None) -> list[tuple[str, str, str]]:
    """(rendered text, start marker, end marker) of every block this module owns."""
    return [
        (releases_table(root), START, END),
        (support_matrix(root), MATRIX_START, MATRIX_END),
        *changelog_blocks(root),
    ]


def releases_table(root: Path | None = None) -> str:
    return render_table(list_releases(root))


def _block_re(start: str, end: str) -> re.Pattern:
    return re.compile(re.escape(start) + r"(.*?)" + re.escape(end), re.S)


def blocks(text: str, start: str = START, end: str = END) -> list[str]:
    """The contents between each marker pair (as stored)."""
    return _block_re(start, end).findall(text)


def _check_markers(text: str, source: str, start: str, end: str) -> None:
    depth = 0
    either = re.compile(re.escape(start) + "|" + re.escape(end))
    for number, line in enumerate(text.splitlines(), 1):
        for marker in either.findall(line):
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


def all_files(root: Path | None = None) -> list[str]:
    """FILES and every page under docs/, relative to the root."""
    root = root or paths.ROOT
    pages = sorted(str(p.relative_to(root)) for p in (root / "docs").glob("*.md"))
    return [*FILES, *pages]


def refresh(
    root: Path | None = None,
    files: tuple[str, ...] | list[str] = FILES,
    check: bool = False,
    extra: list[tuple[str, str, str]] = (),
) -> list[Path]:
    """Rewrite the marked blocks of `files` (missing files and files without markers are skipped)
    with this module's blocks and `extra` ones: (rendered text, start marker, end marker).

    Returns the files whose text changed (with check=True: would change; nothing is written).
    """
    root = root or paths.ROOT
    blocks = [*generated(root), *extra]
    cut = list_releases(root)
    changed = []
    for name in files:
        path = root / name
        if not path.is_file():
            continue
        text = path.read_text()
        # Generated blocks come after: what they list of older releases is theirs to say.
        new = name_newest_release(text, cut[-1].version) if name in NEWEST_PAGES and cut else text
        for table, start, end in blocks:
            new = rewrite_text(new, table, str(path.relative_to(root)), start, end)
        if new != text:
            changed.append(path)
            if not check:
                path.write_text(new)
    return changed


def name_newest_release(text: str, newest: str) -> str:
    """TEXT with each release its commands name (_RELEASE_IN_COMMAND) made `newest`."""
    return _RELEASE_IN_COMMAND.sub(lambda m: m.group(1) + newest, text)


def marked_files(root: Path | None = None, files=None) -> list[Path]:
    """The files holding one of this module's blocks, and the pages naming the newest release
    (a release cut rewrites them all)."""
    root = root or paths.ROOT
    starts = [start for _, start, _ in generated(root)]
    return [
        root / f
        for f in (all_files(root) if files is None else files)
        if (root / f).is_file()
        and (f in NEWEST_PAGES or any(s in (root / f).read_text() for s in starts))
    ]
