"""One shared, hash-verified wheel cache, and environments built quickly from it.

`WheelCache` downloads each pin's wheel once (`pip download --no-deps --only-binary :all:
--require-hashes`), so every later install is local (`--no-index --find-links CACHE`).
`EnvBuilder` turns a set of pins into a working venv: the first build is cold (new venv,
every wheel installed `--no-deps`); later builds reuse the venv and only uninstall / install
what differs, then check installed == pins and run `pip check`.

The venvs hold no pip: a pip from outside drives them with `pip --python` (`pip_python()`
finds one, or makes one with ensurepip, as inside a pax image). `installer="uv"` uses
`uv pip` instead, when uv is on PATH.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import tempfile
import time
import zipfile
from email.parser import HeaderParser
from pathlib import Path

from pax.pip import base_python, installed_versions, pip_env, pip_python, pip_runner
from pax.releases import lockfile
from pax.releases.lockfile import Pin

_REQ_NAME_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def requirement_line(pin: Pin) -> str:
    return " ".join([f"{pin.name}=={pin.version}", *(f"--hash={h}" for h in pin.hashes)])


def wheel_name_version(filename: str) -> tuple[str, str] | None:
    if not filename.endswith(".whl"):
        return None
    parts = filename[:-4].split("-")
    if len(parts) < 5:
        return None
    return lockfile.canonicalize(parts[0]), parts[1]


def _tail(text: str, lines: int = 3) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) if kept else ""


class WheelCache:
    """A folder of wheels, each checked against its pin's sha256 before it is used."""

    def __init__(self, directory: Path, index_args: list[str] | None = None, log=print):
        self.dir = Path(directory)
        self.index_args = list(index_args or [])
        self.log = log
        self.missing: dict[str, str] = {}  # "name==version" -> why it could not be fetched
        self._files: dict[Pin, Path] = {}  # pin -> its verified wheel
        self._sha: dict[Path, str] = {}

    def _sha256(self, path: Path) -> str:
        if path not in self._sha:
            self._sha[path] = lockfile.sha256_file(path)
        return self._sha[path]

    def _scan(self, pins: list[Pin]) -> list[Pin]:
        """Record cached wheels that match a pin's hashes; return the pins still missing."""
        by_name: dict[str, list[Path]] = {}
        for path in self.dir.glob("*.whl"):
            found = wheel_name_version(path.name)
            if found:
                by_name.setdefault(found[0], []).append(path)
        missing = []
        for pin in pins:
            if pin in self._files:
                continue
            want = {h.split(":", 1)[1] for h in pin.hashes if h.startswith("sha256:")}
            for path in by_name.get(pin.name, []):
                if (
                    (self._sha256(path) in want)
                    if want
                    else (wheel_name_version(path.name)[1] == pin.version)
                ):
                    self._files[pin] = path
                    break
            else:
                missing.append(pin)
        return missing

    def _download(self, pins: list[Pin]) -> subprocess.CompletedProcess:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
            req.write("\n".join(requirement_line(p) for p in pins) + "\n")
        hashes = ["--require-hashes"] if all(p.hashes for p in pins) else []
        try:
            return subprocess.run(
                [
                    pip_python(),
                    "-m",
                    "pip",
                    "download",
                    "--no-input",
                    "--quiet",
                    "--no-deps",
                    "--only-binary",
                    ":all:",
                    *hashes,
                    *self.index_args,
                    "-d",
                    str(self.dir),
                    "-r",
                    req.name,
                ],
                capture_output=True,
                text=True,
                env=pip_env(),
            )
        finally:
            Path(req.name).unlink()

    def fetch(self, pins: list[Pin]) -> None:
        """Make every pin's wheel local; what cannot be had is listed in `self.missing`."""
        self.dir.mkdir(parents=True, exist_ok=True)
        todo = self._scan(pins)
        if not todo:
            return
        started = time.monotonic()
        self.log(f"wheel cache {self.dir}: fetching {len(todo)} of {len(pins)} wheels")
        batches: list[list[Pin]] = []  # pip takes one version of a name per call
        for pin in todo:
            batch = next((b for b in batches if all(p.name != pin.name for p in b)), None)
            if batch is None:
                batches.append(batch := [])
            batch.append(pin)
        failed = [self._download(batch).returncode != 0 for batch in batches]
        todo = self._scan(todo)
        if any(failed) or todo:
            for pin in todo:  # one at a time, to name the ones that cannot be had
                out = self._download([pin])
                if self._scan([pin]):
                    self.missing[f"{pin.name}=={pin.version}"] = (
                        _tail(out.stderr + out.stdout, 1) or "no matching wheel"
                    )
        self.log(
            f"wheel cache: {len(pins) - len(self.missing)} of {len(pins)} wheels ready "
            f"in {time.monotonic() - started:.1f}s"
            + (f"; cannot fetch {', '.join(sorted(self.missing))}" if self.missing else "")
        )

    def path(self, pin: Pin) -> Path | None:
        return self._files.get(pin)

    def requires(self, pin: Pin) -> set[str]:
        """Canonical names a wheel depends on (Requires-Dist without extras)."""
        path = self.path(pin)
        if path is None:
            return set()
        with zipfile.ZipFile(path) as wheel:
            meta = next(
                (
                    n
                    for n in wheel.namelist()
                    if n.endswith(".dist-info/METADATA") and n.count("/") == 1
                ),
                None,
            )
            if meta is None:
                return set()
            headers = HeaderParser().parsestr(wheel.read(meta).decode("utf-8", "replace"))
        names = set()
        for req in headers.get_all("Requires-Dist") or []:
            if "extra" in req.split(";", 1)[-1] and ";" in req:
                continue
            match = _REQ_NAME_RE.match(req)
            if match:
                names.add(lockfile.canonicalize(match.group(1)))
        return names


@dataclasses.dataclass
class Build:
    ok: bool  # installed exactly the pins (pip check may still have failed)
    python: Path | None
    kind: str  # "cold" or "warm"
    seconds: float
    installed: int = 0
    removed: int = 0
    pip_check: str = ""  # pip check's complaint; "" when clean
    error: str = ""  # why the pins could not be installed


class EnvBuilder:
    """One venv, rebuilt cold when needed, otherwise moved to the wanted pins in place."""

    def __init__(self, path: Path, cache: WheelCache, installer: str = "pip", log=print):
        self.path = Path(path)
        self.cache = cache
        self.installer = installer
        self.log = log
        self.current: dict[str, Pin] | None = None  # what the venv holds, when known
        if installer == "uv" and not shutil.which("uv"):
            raise RuntimeError("--installer uv: uv is not on PATH (pip install uv, or use pip)")

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def _pip(self, *args: str) -> list[str]:
        if self.installer == "uv":
            rest = [a for a in args[1:] if a != "-y"]  # uv pip uninstall never asks
            return ["uv", "pip", args[0], "--python", str(self.python), *rest]
        runner = pip_runner()
        if runner:
            return [str(self.python), runner, "--no-input", *args]
        return [pip_python(), "-m", "pip", "--python", str(self.python), "--no-input", *args]

    def _run(self, cmd: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, capture_output=True, text=True, env=pip_env())

    def discard(self) -> None:
        self.current = None
        shutil.rmtree(self.path, ignore_errors=True)

    def build(self, pins: dict[str, Pin]) -> Build:
        started = time.monotonic()
        missing = [f"{p.name}=={p.version}" for p in pins.values() if self.cache.path(p) is None]
        if missing:
            why = "; ".join(self.cache.missing[m] for m in missing if m in self.cache.missing)
            return Build(
                False,
                None,
                "none",
                0.0,
                error=f"no wheel in the cache for {', '.join(sorted(missing))}"
                + (f" ({why})" if why else ""),
            )
        kind = "warm" if self.current is not None and self.python.exists() else "cold"
        if kind == "cold":
            self.discard()
            subprocess.run(
                [base_python(), "-m", "venv", "--without-pip", str(self.path)],
                check=True,
                capture_output=True,
            )
            current: dict[str, Pin] = {}
        else:
            current = self.current
        remove = sorted(n for n in current if n not in pins)
        install = [p for n, p in sorted(pins.items()) if current.get(n) != p]
        # Same version, other artifact: pip would call it satisfied; remove it first.
        remove += [
            p.name for p in install if p.name in current and current[p.name].version == p.version
        ]
        self.current = None  # unknown until the steps below succeed
        if remove:
            out = self._run(self._pip("uninstall", "-y", *sorted(set(remove))))
            if out.returncode != 0:
                self.discard()
                return Build(
                    False,
                    None,
                    kind,
                    time.monotonic() - started,
                    error="uninstall failed: " + _tail(out.stderr + out.stdout),
                )
        if install:
            with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
                req.write("\n".join(requirement_line(p) for p in install) + "\n")
            hashes = ["--require-hashes"] if all(p.hashes for p in install) else []
            try:
                out = self._run(
                    self._pip(
                        "install",
                        "--no-deps",
                        "--no-compile",
                        "--no-index",
                        "--find-links",
                        str(self.cache.dir),
                        *hashes,
                        "-r",
                        req.name,
                    )
                )
            finally:
                Path(req.name).unlink()
            if out.returncode != 0:
                self.discard()
                return Build(
                    False,
                    None,
                    kind,
                    time.monotonic() - started,
                    error="install failed: " + _tail(out.stderr + out.stdout),
                )
        have = installed_versions(self.python)
        want = {n: p.version for n, p in pins.items()}
        if have != want:
            wrong = sorted(n for n in set(have) | set(want) if have.get(n) != want.get(n))
            self.discard()
            if kind == "warm":  # reuse went wrong somehow: start over once
                return self.build(pins)
            return Build(
                False,
                None,
                kind,
                time.monotonic() - started,
                error="installed set differs from the pins: " + ", ".join(wrong),
            )
        self.current = dict(pins)
        check = self._run(self._pip("check"))
        problem = (
            ""
            if check.returncode == 0
            else (_tail(check.stdout + check.stderr, 5) or "pip check failed")
        )
        return Build(
            True,
            self.python,
            kind,
            time.monotonic() - started,
            installed=len(install),
            removed=len(set(remove)),
            pip_check=problem,
        )
