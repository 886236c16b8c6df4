"""Packages as locks, wheels and environments name them: the one home of

- PEP 503 names (`canonicalize`),
- PEP 440 version order (`version_key`),
- pip-compile lockfiles with hashes (`parse_lockfile`: canonical name -> `Pin`, a version and its
  hashes; `Lock`: one lockfile's pins with the name people know it by),
- wheel filenames (`parse_wheel_filename`),
- what an environment has installed, and how that differs from a lock (`installed`,
  `installed_in`, `differences`, each difference's one line of text `difference_text`), and
  where two locks disagree (`disagreements`).

Standard library only (and pax.errors, where pax is importable), so the trainer (pax.envinfo),
the distribution packages in the tools venv and an image's runtime venv all read packages the
same way; `python -I lockfile.py` lists what any interpreter's environment holds, whether or not
pax is there. The tests compare this module with packaging (canonicalize_name,
parse_wheel_filename, Version) on messy inputs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

try:
    from pax.errors import PaxError
except ImportError:  # run as a script, or in an image as pax_lockfile.py beside an older pax

    class PaxError(Exception):
        """pax.errors.PaxError where pax is not importable."""


_NAME_RE = re.compile(r"[-_.]+")
_PIN_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*===?\s*([^\s;\\]+)")
_HASH_RE = re.compile(r"--hash=(\w+:[0-9a-fA-F]+)")
_WHEEL_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?$")
_BUILD_TAG_RE = re.compile(r"^\d[^-]*$")


class LockfileError(PaxError, ValueError):
    """A lockfile line that is not `name==version` with hashes."""


@dataclasses.dataclass(frozen=True)
class Pin:
    name: str  # canonical (PEP 503) name
    version: str
    hashes: tuple[str, ...] = ()

    @property
    def sha256s(self) -> set[str]:
        """The sha256 hex digests the pin accepts, lower case as sha256_file writes them."""
        return {h.split(":", 1)[1].lower() for h in self.hashes if h.lower().startswith("sha256:")}


@dataclasses.dataclass(frozen=True)
class Lock:
    """One lockfile: its text and pins, LABEL naming it for people (a path, `1.4.0
    (releases/1.4.0/cpu.txt)`); RELEASE and PLATFORM where it is a release's lock."""

    label: str
    text: str
    pins: dict[str, Pin]
    release: str | None = None
    platform: str | None = None

    @classmethod
    def parse(cls, text: str, label: str, source: str | None = None, **release) -> Lock:
        """The lock of TEXT; LockfileError names SOURCE (default: LABEL) and the line."""
        return cls(label, text, parse_lockfile_text(text, source or label), **release)

    @classmethod
    def read(cls, path: str | Path, label: str | None = None, **release) -> Lock:
        return cls.parse(Path(path).read_text(), label or str(path), str(path), **release)

    @property
    def versions(self) -> dict[str, str]:
        return versions(self.pins)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


class VersionKey(NamedTuple):
    """A version's place in PEP 440 order (packaging.version's, from the standard library): one
    PEP 440 rejects sorts before every valid one, by its text."""

    valid: bool
    epoch: int
    release: tuple[int, ...]  # trailing zeros dropped: 1.0 == 1.0.0
    pre: tuple  # (0,) a dev release of no pre or post release; (1, a|b|rc, n); (2,) none
    post: tuple  # (0,) none; (1, n)
    dev: tuple  # (0, n); (1,) none
    local: tuple  # (0,) none; (1, segments), a number above any word
    text: str  # what PEP 440 rejects, as written


_VERSION_RE = re.compile(
    r"""^\s*v?(?:(?P<epoch>[0-9]+)!)?(?P<release>[0-9]+(?:\.[0-9]+)*)
    (?P<pre>[-_.]?(?P<pre_l>alpha|a|beta|b|preview|pre|c|rc)[-_.]?(?P<pre_n>[0-9]+)?)?
    (?P<post>-(?P<post_n1>[0-9]+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>[0-9]+)?)?
    (?P<dev>[-_.]?dev[-_.]?(?P<dev_n>[0-9]+)?)?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?\s*$""",
    re.VERBOSE | re.IGNORECASE,
)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}


def version_key(version: str) -> VersionKey:
    """The sort key of a version in PEP 440 order: `sorted(vs, key=version_key)`, and two
    versions are the same release when their keys are equal (`1.0` and `1.0.0`)."""
    m = _VERSION_RE.match(version)
    if not m:
        return VersionKey(False, 0, (), (), (), (), (), version)
    release = [int(n) for n in m["release"].split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    if m["pre"]:
        pre = (1, _PRE_RANK[m["pre_l"].lower()], int(m["pre_n"] or 0))
    else:
        pre = (0,) if m["dev"] and not m["post"] else (2,)
    post = (1, int(m["post_n1"] or m["post_n2"] or 0)) if m["post"] else (0,)
    dev = (0, int(m["dev_n"] or 0)) if m["dev"] else (1,)
    local = (0,)
    if m["local"]:
        parts = re.split(r"[-_.]", m["local"].lower())
        local = (1, tuple((1, int(p), "") if p.isdigit() else (0, 0, p) for p in parts))
    return VersionKey(True, int(m["epoch"] or 0), tuple(release), pre, post, dev, local, "")


def canonicalize(name: str) -> str:
    """PEP 503 normalised name: `Orbax_Checkpoint` -> `orbax-checkpoint`."""
    return _NAME_RE.sub("-", name).lower()


def sha256_file(path: str | Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _logical_lines(text: str):
    """Yield (line number, requirement line) with `\\` continuations joined, comments dropped."""
    buf, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0] if not raw.lstrip().startswith("#") else ""
        line = line.strip()
        if not buf:
            start = number
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            yield start, buf.strip()
        buf = ""
    if buf.strip():
        yield start, buf.strip()


def parse_lockfile_text(text: str, source: str = "<lockfile>") -> dict[str, Pin]:
    pins: dict[str, Pin] = {}
    for number, line in _logical_lines(text):
        if line.startswith("-"):  # global options (--index-url, -c ...): not packages
            continue
        match = _PIN_RE.match(line)
        if not match:
            raise LockfileError(f"{source}:{number}: expected `name==version`, got {line!r}")
        name = canonicalize(match.group(1))
        if name in pins:
            raise LockfileError(f"{source}:{number}: {name} pinned twice")
        pins[name] = Pin(name, match.group(3), tuple(_HASH_RE.findall(line)))
    return pins


def parse_lockfile(path: str | Path) -> dict[str, Pin]:
    path = Path(path)
    return parse_lockfile_text(path.read_text(), str(path))


def versions(pins: dict[str, Pin]) -> dict[str, str]:
    return {name: pin.version for name, pin in pins.items()}


def lock_versions(text: str, source: str = "<lockfile>") -> dict[str, str]:
    """name -> version of a lockfile's text."""
    return versions(parse_lockfile_text(text, source))


class Wheel(NamedTuple):
    name: str  # canonical (PEP 503)
    version: str  # as the filename spells it
    build: str  # build tag, "" when there is none
    tags: str  # python-abi-platform, compressed tag sets as written (`py2.py3-none-any`)


def parse_wheel_filename(filename: str) -> Wheel | None:
    """`Name-1.0(-build)?-py3-none-any.whl` -> Wheel; None for any other file name (sdists,
    names with a dash that wheels escape, a build tag that does not start with a digit)."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[: -len(".whl")].split("-")
    if len(parts) not in (5, 6) or not all(parts):
        return None
    if not _WHEEL_NAME_RE.match(parts[0]):
        return None
    build = parts[2] if len(parts) == 6 else ""
    if build and not _BUILD_TAG_RE.match(build):
        return None
    return Wheel(canonicalize(parts[0]), parts[1], build, "-".join(parts[-3:]))


def installed(path: list[str] | None = None) -> dict[str, str]:
    """name -> version of what this interpreter imports: the first distribution of each name
    along sys.path (a later copy of the same name is shadowed, as it is for `import`)."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions(path=sys.path if path is None else path):
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonicalize(name), dist.version)
    return found


def installed_twice(path: list[str] | None = None) -> dict[str, list[str]]:
    """Names installed more than once along the path, with every version found (first wins)."""
    seen: dict[str, list[str]] = {}
    for dist in importlib.metadata.distributions(path=sys.path if path is None else path):
        name = dist.metadata["Name"]
        if name:
            seen.setdefault(canonicalize(name), []).append(dist.version)
    return {name: found for name, found in seen.items() if len(found) > 1}


def installed_in(python: str | Path) -> dict[str, str]:
    """`installed()` of another interpreter's environment (its site-packages only: isolated
    mode, and this file run as a script, so nothing of pax or the caller is on its path)."""
    out = subprocess.run(
        [str(python), "-I", __file__, "installed"], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out)


def differences(
    have: dict[str, str], locked: dict[str, str], ignore=("pax",), left_out=()
) -> list[dict]:
    """What separates an installed set from a lock, one row per package, by name: `kind` is
    extra (`locked` None), missing (`installed` None) or changed. Empty when they are equal.
    pax itself is never in a lock, so it is left out by default. `left_out`: names an image's
    recipe removed on purpose (its identity file's `left_out`); absent is what they should be."""
    locked = {name: v for name, v in locked.items() if name not in left_out}
    rows = []
    for name in sorted((set(have) | set(locked)) - set(ignore)):
        want, got = locked.get(name), have.get(name)
        if want != got:
            kind = "extra" if want is None else "missing" if got is None else "changed"
            rows.append({"package": name, "locked": want, "installed": got, "kind": kind})
    return rows


def difference_text(row: dict) -> str:
    """One row of `differences` as the one line every report of a drifted env shows."""
    name, locked, have = row["package"], row["locked"], row["installed"]
    if row["kind"] == "missing":
        return f"{name}=={locked} is in the lock but not installed"
    if row["kind"] == "extra":
        return f"{name}=={have} is installed but not in the lock"
    return f"{name}: lock pins {locked}, installed {have}"


def disagreements(ours: dict[str, str], theirs: dict[str, str]) -> dict[str, tuple[str, str]]:
    """name -> (ours, theirs) for each package both sets name at different versions."""
    shared = sorted(set(ours) & set(theirs))
    return {n: (ours[n], theirs[n]) for n in shared if ours[n] != theirs[n]}


if __name__ == "__main__" and sys.argv[1:] == ["installed"]:
    print(json.dumps(installed()))
