"""What a package index publishes: one package's versions and the sha256 of their wheels.

Reads the same places pip reads (standard library only):

  a PEP 503 simple index     GET <index-url>/<name>/ and its `<a href=...#sha256=...>` links
  a find-links folder        its *.whl files (hashed here)
  a find-links page          an HTML page of links, as a simple index page

Only wheels count (the bisect installs `--only-binary :all:`); yanked files (PEP 592) are left
out, as pip leaves them out unless pinned.
"""

from __future__ import annotations

import html.parser
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import NamedTuple

from pax import lockfile
from pax.errors import PaxError

PYPI_SIMPLE = "https://pypi.org/simple/"


class IndexUnreadable(PaxError, RuntimeError):
    """The index could not be read; the message names it."""


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "a" and attrs.get("href"):
            self.links.append((attrs["href"], attrs))


def wheel_version(filename: str, name: str) -> str | None:
    """The version of `name` that a wheel filename carries, or None for other files."""
    wheel = lockfile.parse_wheel_filename(filename)
    return wheel.version if wheel and wheel.name == name else None


def _read(url: str, timeout: float) -> str:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":  # a file:// index is a folder tree with index.html pages
        path = Path(urllib.request.url2pathname(parsed.path))
        if path.is_dir():
            path = path / "index.html"
        return path.read_text(errors="replace") if path.is_file() else ""
    request = urllib.request.Request(url, headers={"Accept": "text/html"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        if err.code == 404:  # the index does not carry the package
            return ""
        raise IndexUnreadable(f"{url}: HTTP {err.code}") from err
    except (urllib.error.URLError, OSError) as err:
        raise IndexUnreadable(f"{url}: {getattr(err, 'reason', err)}") from err


def _page_wheels(text: str, name: str) -> list[tuple[str, str | None]]:
    """(version, sha256 or None) for each wheel of `name` a page links to, yanked ones left out."""
    parser = _Links()
    parser.feed(text)
    wheels = []
    for href, attrs in parser.links:
        if "data-yanked" in attrs:
            continue
        path, _, fragment = href.partition("#")
        version = wheel_version(urllib.parse.unquote(path.rsplit("/", 1)[-1]), name)
        if version is not None:
            digest = dict(p.split("=", 1) for p in fragment.split("&") if "=" in p).get("sha256")
            wheels.append((version, digest))
    return wheels


class Place(NamedTuple):
    """One place pip reads packages from."""

    what: str  # as messages name it: `--find-links DIR`, `index URL`
    location: str  # a find-links folder or page, or a simple index's base URL
    is_index: bool

    def page(self, name: str) -> str:
        """Where `name`'s wheels are listed: the index's page of it, else the place itself."""
        if self.is_index:
            return f"{self.location.rstrip('/')}/{lockfile.canonicalize(name)}/"
        return self.location


def places(
    index_url: str | None = None, find_links: list[str] = (), no_index: bool = False
) -> list[Place]:
    """Where pip looks for packages, in its order: the find-links, then the index (the one
    given, else $PIP_INDEX_URL, else PyPI's) unless no_index."""
    found = [Place(f"--find-links {place}", place, False) for place in find_links]
    if not no_index:
        base = index_url or os.environ.get("PIP_INDEX_URL") or PYPI_SIMPLE
        found.append(Place(f"index {base}", base, True))
    return found


def published(
    name: str,
    index_url: str | None = None,
    find_links: list[str] = (),
    no_index: bool = False,
    timeout: float = 30.0,
) -> dict[str, tuple[str, ...]]:
    """version -> `sha256:` hashes of its wheels; () when some wheel of it has no published hash."""
    name = lockfile.canonicalize(name)
    wheels: list[tuple[str, str | None]] = []
    for place in places(index_url, find_links, no_index):
        if "://" in place.page(name):
            wheels += _page_wheels(_read(place.page(name), timeout), name)
            continue
        for path in sorted(Path(place.location).glob("*.whl")):
            version = wheel_version(path.name, name)
            if version is not None:
                wheels.append((version, lockfile.sha256_file(path)))
    hashes: dict[str, set[str | None]] = {}
    for version, digest in wheels:
        hashes.setdefault(version, set()).add(digest)
    # An unhashed wheel leaves the version unhashed: pip might pick exactly that file.
    return {
        v: () if None in h else tuple(sorted(f"sha256:{d}" for d in h)) for v, h in hashes.items()
    }


def check_sources(probe: str, sources: list[Place], timeout: float = 15.0) -> None:
    """Raise IndexUnreadable, naming the place and the fix, when a source pip would read cannot
    be: a find-links folder that does not exist, a page or index that does not answer.

    pip retries an unreachable index for minutes, then says only that no version satisfies the
    requirement; reading one page (`probe`'s) first turns that into the real reason."""
    for place in sources:
        if "://" in place.page(probe):
            _answering(place.page(probe), timeout, place.what)
        elif not Path(place.location).is_dir():
            raise IndexUnreadable(f"{place.what}: no such folder")


def _answering(url: str, timeout: float, what: str) -> None:
    try:
        _read(url, timeout)
    except IndexUnreadable as err:
        reason = str(err).removeprefix(f"{url}: ")
        raise IndexUnreadable(
            f"{what} is unreachable ({reason}): check the address and the network, or work "
            "offline with --no-index --find-links DIR"
        ) from None
