"""Read pip-compile lockfiles: canonical name -> version + hashes."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path

_NAME_RE = re.compile(r"[-_.]+")
_PIN_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s;\\]+)")
_HASH_RE = re.compile(r"--hash=(\w+:[0-9a-fA-F]+)")


class LockfileError(ValueError):
    """A lockfile line that is not `name==version` with hashes."""


@dataclasses.dataclass(frozen=True)
class Pin:
    name: str  # canonical (PEP 503) name
    version: str
    hashes: tuple[str, ...] = ()


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
