"""One shared, hash-verified wheel cache, and environments built quickly from it.

`WheelCache` downloads each pin's wheel once (`pip download --no-deps --only-binary :all:
--require-hashes`), so every later install is local (`--no-index --find-links CACHE`).
`EnvBuilder` turns a set of pins into a working venv: the first build is cold (new venv,
every wheel installed `--no-deps`); later builds reuse the venv and only uninstall / install
what differs, then check installed == pins and run `pip check`.

The venvs hold no pip: an installer from outside drives them (pax.environments.install: uv
where there is one, or pip, found or made with ensurepip as inside a pax image).

The images keep a store of their own (pax.images.wheelhouse): exactly one lock's wheels for the
image's platform, the files a build copies; this cache gathers any pin's wheel for an
interpreter here, however many versions of a package a bisect needs. One folder serves every
interpreter: a `WheelCache` is one interpreter's view of it (wheels whose tags fit it, fetched
with pip's `--python-version`), so a bisect across Pythons shares the pure wheels.
"""

from __future__ import annotations

import configparser
import dataclasses
import functools
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from email.parser import HeaderParser
from pathlib import Path

from packaging import tags
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from pax import interpreters, lockfile
from pax.environments import index
from pax.environments.install import (
    Installer,
    download,
    install_from_folder,
    pip_check,
    requirements_file,
)
from pax.lockfile import Pin, version_key
from pax.pip import base_python, make_venv

_REQ_NAME_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _tail(text: str, lines: int = 3) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) if kept else ""


@dataclasses.dataclass(frozen=True)
class Problem:
    """A pin whose wheel cannot be had; `message` is one line that names the fix."""

    kind: str  # "hash mismatch" | "no wheel" | "unusable" (pip refuses it) | "unreachable"
    pin: str  # name==version ("" for a source that does not answer)
    message: str
    file: str = ""  # hash mismatch: the file the index served ...
    expected: tuple[str, ...] = ()  # ... the lock's hashes ...
    actual: str = ""  # ... and the file's

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


_NO_MATCH_RE = re.compile(r"No matching distribution found for (\S+)")
_FROM_VERSIONS_RE = re.compile(r"\(from versions: ([^)]*)\)")
_OTHER_PYTHON_RE = re.compile(
    r"Package '([^']+)' requires a different Python: \S+ not in '([^']*)'"
)


def platform_label(version: str = "%d.%d" % sys.version_info[:2]) -> str:
    """What a wheel's tags must fit for Python `version` ("3.13") on this machine."""
    return f"{platform.python_implementation()} {version} on {sysconfig.get_platform()}"


@functools.cache
def _supported_tags(version: str) -> frozenset[tags.Tag]:
    """The wheel tags CPython `version` ("3.13") installs on this machine: what pip's
    `--python-version` selects by (packaging's sys_tags, for another minor version)."""
    major, minor = map(int, version.split("."))
    return frozenset(
        [
            *tags.cpython_tags((major, minor)),
            *tags.compatible_tags((major, minor), interpreter=f"cp{major}{minor}"),
        ]
    )


def _dist_info(path: Path, filename: str) -> str | None:
    """A file of a wheel's top-level .dist-info folder, as text; None when absent."""
    with zipfile.ZipFile(path) as wheel:
        member = next(
            (
                n
                for n in wheel.namelist()
                if n.endswith(f".dist-info/{filename}") and n.count("/") == 1
            ),
            None,
        )
        return wheel.read(member).decode("utf-8", "replace") if member else None


def _refuses(path: Path, python_version: str) -> str:
    """Why CPython `python_version` ("3.13.0") cannot take the wheel ("" when it can): no tag
    it supports ("tags"), or a Requires-Python that leaves it out (installing from a folder, uv
    does not check that)."""
    found = lockfile.parse_wheel_filename(path.name)
    major_minor = ".".join(python_version.split(".")[:2])
    if not found or tags.parse_tag(found.tags).isdisjoint(_supported_tags(major_minor)):
        return "tags"
    needs = HeaderParser().parsestr(_dist_info(path, "METADATA") or "").get("Requires-Python")
    try:
        admitted = not needs or SpecifierSet(needs).contains(python_version, prereleases=True)
    except InvalidSpecifier:  # the installer will say
        admitted = True
    return "" if admitted else f"requires Python {needs}"


def _pip_errors(text: str, fallback_lines: int = 3) -> str:
    """The installer's error lines (pip's `ERROR:`, uv's `error:` and its indented `cause:`s);
    progress lines say nothing about what went wrong. Else a tail."""
    errors = [
        line.strip()
        for line in text.splitlines()
        if line.startswith(("ERROR:", "error:")) or line.lstrip().startswith("cause:")
    ]
    return " | ".join(errors) if errors else _tail(text, fallback_lines)


def _batches(pins: list[Pin]) -> list[list[Pin]]:
    """pip takes one version of a name per call."""
    batches: list[list[Pin]] = []
    for pin in pins:
        batch = next((b for b in batches if all(p.name != pin.name for p in b)), None)
        if batch is None:
            batches.append(batch := [])
        batch.append(pin)
    return batches


def _key(pin: Pin) -> str:
    return f"{pin.name}=={pin.version}"


def _same_version(path: Path, pin: Pin) -> bool:
    found = lockfile.parse_wheel_filename(path.name)
    return (
        bool(found)
        and found.name == pin.name
        and version_key(found.version) == version_key(pin.version)
    )


def _find_pin(pins: list[Pin], requirement: str) -> Pin | None:
    """The pin pip names in `No matching distribution found for NAME==VERSION`."""
    match = _REQ_NAME_RE.match(requirement)
    name = lockfile.canonicalize(match.group(1)) if match else ""
    return next((p for p in pins if p.name == name), None)


class WheelCache:
    """A folder of wheels, each checked against its pin's sha256 before it is used, seen by one
    interpreter (`python`, default the base of this one): the wheels it can install (their tags
    and Requires-Python)."""

    def __init__(
        self,
        directory: Path,
        index_url: str | None = None,
        find_links: list[str] = (),
        no_index: bool = False,
        log=print,
        python: str | None = None,
    ):
        self.dir = Path(directory)
        self.python = python or base_python()
        # "3.13.0": Requires-Python sees it
        self.python_version = interpreters.full_version(self.python)
        if self.python_version is None:
            raise RuntimeError(f"{self.python} does not start; name another interpreter")
        self.version = ".".join(self.python_version.split(".")[:2])
        self.index_args = (  # pip's options for the places, and the interpreter it fetches for
            (["--index-url", index_url] if index_url else [])
            + [a for d in find_links for a in ("--find-links", d)]
            + (["--no-index"] if no_index else [])
            + ["--python-version", self.python_version]
        )
        self.places = index.places(index_url, find_links, no_index)
        self.log = log
        self.problems: dict[Pin, Problem] = {}  # why a pin's wheel cannot be had
        self._files: dict[Pin, Path] = {}  # pin -> its verified wheel for this interpreter
        self._other: dict[Pin, Path] = {}  # ... or one for another (its metadata is read)
        self._sha: dict[Path, str] = {}

    def where(self) -> str:
        named = ", ".join(place.what for place in self.places)
        return named or "nowhere (--no-index without --find-links)"

    def _sha256(self, path: Path) -> str:
        if path not in self._sha:
            self._sha[path] = lockfile.sha256_file(path)
        return self._sha[path]

    def _scan(self, pins: list[Pin]) -> list[Pin]:
        """Record cached wheels that match a pin's hashes; return the pins still missing. A pin
        whose wheel is here but requires another Python is not missing: it cannot be had."""
        by_name: dict[str, list[Path]] = {}
        for path in self.dir.glob("*.whl"):
            found = lockfile.parse_wheel_filename(path.name)
            if found:
                by_name.setdefault(found.name, []).append(path)
        missing = []
        for pin in pins:
            if pin in self._files:
                continue
            want = pin.sha256s
            refused = ""
            for path in by_name.get(pin.name, []):
                if (self._sha256(path) in want) if want else _same_version(path, pin):
                    refused = _refuses(path, self.python_version)
                    if not refused:
                        self._files[pin] = path
                        break
                    self._other.setdefault(pin, path)
            else:
                if refused.startswith("requires"):  # a release's wheels share Requires-Python
                    message = f"{_key(pin)} {refused}, not {self.version}"
                    self.problems[pin] = Problem("no wheel", _key(pin), message)
                else:
                    missing.append(pin)
        return missing

    def _download(
        self, pins: list[Pin], dest: Path, verify: bool = True
    ) -> subprocess.CompletedProcess:
        hashes = verify and all(p.hashes for p in pins)
        with requirements_file(pins, hashed=verify) as req:
            return download(req, dest, *self.index_args, require_hashes=hashes)

    def fetch(self, pins: list[Pin]) -> list[Problem]:
        """Make every pin's wheel local, verified; return the problems with those that cannot be.

        One `pip download --require-hashes` per batch does the common case. When a batch fails,
        pip names neither every missing wheel nor a mismatching file it did not keep, so the
        pins still missing are downloaded again without hashes into a folder of their own,
        batch by batch (a pin pip cannot find is taken out and the batch tried again), and
        each file is hashed here: a match joins the cache, anything else is a hash mismatch.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        todo = self._scan(pins)
        if not todo:
            return [self.problems[p] for p in pins if p in self.problems]
        try:
            index.check_sources(todo[0].name, self.places)
        except index.IndexUnreadable as err:
            return [Problem("unreachable", "", str(err))]
        started = time.monotonic()
        self.log(
            f"wheel cache {self.dir}: fetching {len(todo)} of {len(pins)} wheels "
            f"for Python {self.version}"
        )
        for batch in _batches(todo):
            self._download(batch, self.dir)
        todo = self._scan(todo)
        if todo:
            self.problems.update(self._diagnose(todo))
            todo = self._scan(todo)
        for pin in todo:  # nothing came back and pip said nothing we understood
            self.problems.setdefault(
                pin,
                Problem(
                    "no wheel",
                    _key(pin),
                    f"{_key(pin)}: pip could not fetch it from {self.where()}",
                ),
            )
        found = [self.problems[p] for p in pins if p in self.problems]
        self.log(
            f"wheel cache: {len(pins) - len(found)} of {len(pins)} wheels ready "
            f"in {time.monotonic() - started:.1f}s"
            + (f"; {len(found)} cannot be had" if found else "")
        )
        return found

    def _diagnose(self, pins: list[Pin]) -> dict[Pin, Problem]:
        problems: dict[Pin, Problem] = {}
        incoming = Path(tempfile.mkdtemp(prefix=".incoming-", dir=self.dir))
        try:
            unique = list({_key(p): p for p in pins}.values())  # one download per version
            for batch in _batches(unique):
                remaining = list(batch)
                while remaining:
                    out = self._download(remaining, incoming, verify=False)
                    if out.returncode == 0:
                        break
                    text = out.stderr + out.stdout
                    match = _NO_MATCH_RE.search(text) or _OTHER_PYTHON_RE.search(text)
                    named = match and _find_pin(remaining, match.group(1))
                    if not named:  # a failure pip does not pin on one requirement: one by one
                        for pin in remaining:
                            one = self._download([pin], incoming, verify=False)
                            if one.returncode != 0:
                                problems[pin] = self._unfetchable(pin, one.stderr + one.stdout)
                        break
                    problems[named] = self._no_wheel(named, text)
                    remaining.remove(named)
            for path in sorted(incoming.glob("*.whl")):
                actual = lockfile.sha256_file(path)
                # GOOD and BAD may pin one version with other hashes (a rebuild): each pin
                # takes the file or not on its own hashes
                takers = [p for p in pins if _same_version(path, p)]
                wrong = [p for p in takers if p.sha256s and actual not in p.sha256s]
                if len(wrong) < len(takers):
                    os.replace(path, self.dir / path.name)
                for pin in wrong:
                    expected = tuple(f"sha256:{h}" for h in sorted(pin.sha256s))
                    problems[pin] = Problem(
                        "hash mismatch",
                        _key(pin),
                        f"hash mismatch for {_key(pin)}: {path.name} from {self.where()} "
                        f"has sha256:{actual}, the lock expects {' or '.join(expected)}; "
                        "the index serves another file than the lock was made from: fetch "
                        "from the index the lock was made against, or re-lock",
                        file=path.name,
                        expected=expected,
                        actual=f"sha256:{actual}",
                    )
        finally:
            shutil.rmtree(incoming, ignore_errors=True)
        for pin in pins:  # a version pip could not find, for every pin of it
            twin = next((p for p in problems if _key(p) == _key(pin)), None)
            if twin is not None and problems[twin].kind == "no wheel":
                problems.setdefault(pin, problems[twin])
        return problems

    def _unfetchable(self, pin: Pin, pip_text: str) -> Problem:
        if _NO_MATCH_RE.search(pip_text) or _OTHER_PYTHON_RE.search(pip_text):
            return self._no_wheel(pin, pip_text)
        return Problem(
            "unusable",
            _key(pin),
            f"{_key(pin)}: pip cannot fetch it from {self.where()}: {_pip_errors(pip_text, 1)}",
        )

    def _no_wheel(self, pin: Pin, pip_text: str) -> Problem:
        other = _OTHER_PYTHON_RE.search(pip_text)
        if other and _find_pin([pin], other.group(1)):
            return Problem(
                "no wheel",
                _key(pin),
                f"{_key(pin)} requires Python {other.group(2)}, not {self.version}",
            )
        versions = _FROM_VERSIONS_RE.search(pip_text)
        seen = f"; versions there: {versions.group(1) or 'none'}" if versions else ""
        return Problem(
            "no wheel",
            _key(pin),
            f"no wheel of {_key(pin)} for this platform ({platform_label(self.version)}) on "
            f"{self.where()}{seen}: use the lock made for this platform, or add the wheel "
            "with --find-links DIR",
        )

    def path(self, pin: Pin) -> Path | None:
        return self._files.get(pin)

    def why_missing(self, pins: list[Pin]) -> str:
        """Why these pins have no wheel here: the problems fetching them met, or that they were
        never fetched."""
        known = [self.problems[p].message for p in pins if p in self.problems]
        return "; ".join(known) or f"no wheel in the cache for {', '.join(sorted(map(_key, pins)))}"

    def _read_meta(self, pin: Pin, filename: str) -> str | None:
        """A file of the wheel's top-level .dist-info folder, as text; None when absent. A
        wheel for another interpreter serves when this one has none (BAD's jax on GOOD's
        Python): a release's wheels carry one metadata."""
        path = self.path(pin) or self._other.get(pin)
        return None if path is None else _dist_info(path, filename)

    def requires(self, pin: Pin) -> set[str]:
        """Canonical names a wheel depends on (Requires-Dist without extras)."""
        meta = self._read_meta(pin, "METADATA")
        if meta is None:
            return set()
        headers = HeaderParser().parsestr(meta)
        names = set()
        for req in headers.get_all("Requires-Dist") or []:
            if "extra" in req.split(";", 1)[-1] and ";" in req:
                continue
            match = _REQ_NAME_RE.match(req)
            if match:
                names.add(lockfile.canonicalize(match.group(1)))
        return names

    def scripts(self, pin: Pin) -> set[str]:
        """The commands a wheel puts in bin/: its entry points' scripts and its data scripts."""
        names = set()
        entry_points = configparser.ConfigParser(delimiters=("=",), interpolation=None)
        entry_points.optionxform = str  # script names are case-sensitive
        try:
            entry_points.read_string(self._read_meta(pin, "entry_points.txt") or "")
        except configparser.Error:
            pass
        for section in ("console_scripts", "gui_scripts"):
            if entry_points.has_section(section):
                names |= set(entry_points[section])
        path = self.path(pin)
        if path is not None:
            with zipfile.ZipFile(path) as wheel:
                for member in wheel.namelist():
                    head, _, script = member.partition(".data/scripts/")
                    if script and "/" not in head and "/" not in script:
                        names.add(script)
        return names


@dataclasses.dataclass
class Build:
    ok: bool  # installed exactly the pins (pip check may still have failed)
    python: Path | None
    kind: str  # cold (new venv), warm (changed in place), reuse (as it was), none (no wheel)
    seconds: float
    installed: int = 0
    removed: int = 0
    pip_check: str = ""  # pip check's complaint; "" when clean
    error: str = ""  # why the pins could not be installed


class EnvBuilder:
    """One venv, rebuilt cold when needed, otherwise moved to the wanted pins in place; made
    from the cache's interpreter, whose wheels it installs."""

    def __init__(self, path: Path, cache: WheelCache, installer: str = "auto", log=print):
        self.path = Path(path)
        self.cache = cache
        self.log = log
        self.current: dict[str, Pin] | None = None  # what the venv holds, when known
        self._pip_check = ""  # pip check's complaint about `current`
        self._installer = Installer.choose(installer)  # the release envs' rule, unless told
        self.installer = self._installer.name

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def discard(self) -> None:
        self.current = None
        shutil.rmtree(self.path, ignore_errors=True)

    def build(self, pins: dict[str, Pin]) -> Build:
        started = time.monotonic()
        missing = [p for p in pins.values() if self.cache.path(p) is None]
        if missing:
            return Build(False, None, "none", 0.0, error=self.cache.why_missing(missing))
        if self.current == pins and self.python.exists():  # judged again: nothing to build
            return Build(True, self.python, "reuse", 0.0, pip_check=self._pip_check)
        kind = "warm" if self.current is not None and self.python.exists() else "cold"
        if kind == "cold":
            self.discard()
            make_venv(self.path, python=self.cache.python)
        remove, install = _changes(self.current or {}, pins)
        self.current = None  # unknown until the steps below succeed
        error = self._change(remove, install)
        if not error and (wrong := self._differing(pins)):
            if kind == "warm":  # reuse went wrong somehow: start over once
                self.discard()
                return self.build(pins)
            error = "installed set differs from the pins: " + ", ".join(wrong)
        if error:
            self.discard()
            return Build(False, None, kind, time.monotonic() - started, error=error)
        problem = self._check()
        self.current, self._pip_check = dict(pins), problem
        seconds = time.monotonic() - started
        return Build(True, self.python, kind, seconds, len(install), len(remove), problem)

    def _change(self, remove: list[str], install: list[Pin]) -> str:
        """Uninstall `remove`, then install `install` from the cache; why that failed, or ""."""
        if remove:
            out = self._installer.run(
                self.python, "uninstall", "-y", *remove, capture_output=True, text=True
            )
            if out.returncode != 0:
                return "uninstall failed: " + _pip_errors(out.stderr + out.stdout)
        if not install:
            return ""
        out = install_from_folder(self._installer, self.python, install, self.cache.dir)
        return (
            "" if out.returncode == 0 else "install failed: " + _pip_errors(out.stderr + out.stdout)
        )

    def _differing(self, pins: dict[str, Pin]) -> list[str]:
        """The names whose installed version is not the pinned one (or is there unpinned)."""
        want = {n: p.version for n, p in pins.items()}
        rows = lockfile.differences(lockfile.installed_in(self.python), want, ignore=())
        return [row["package"] for row in rows]

    def _check(self) -> str:
        """pip check's complaint; "" when clean."""
        return pip_check(self.python, self._installer)


def _changes(current: dict[str, Pin], pins: dict[str, Pin]) -> tuple[list[str], list[Pin]]:
    """The names to uninstall and the pins to install to move `current` to `pins`."""
    install = [p for n, p in sorted(pins.items()) if current.get(n) != p]
    remove = {n for n in current if n not in pins}
    # Same version, other artifact: pip would call it satisfied; remove it first.
    remove |= {
        p.name for p in install if p.name in current and current[p.name].version == p.version
    }
    return sorted(remove), install
