"""Cut a release: `./noxw -s release -- X.Y.Z [--skip-tests] [--base-image IMAGE]`;
`./noxw -s release -- X.Y.Z --recreate` puts branch rX.Y.Z and tag vX.Y.Z back at the
release's recorded source (a fresh clone has neither).

1. refuse unless X.Y.Z is new (no releases/X.Y.Z, branch rX.Y.Z or tag vX.Y.Z) and the git
   tree is clean;
2. write releases/X.Y.Z/release.toml (version, today's date, branch, Python, base image,
   resolved_before = now, so relocking later sees the index as it was at the cut);
3. compile the cpu lock without pins and read the headline versions out of it: the newest
   matched set pip-compile resolves for requirements/; write them as the release's
   [versions] (and constraints.txt);
4. compile the cpu, tpu and gpu locks with those pins, then the test tools' lock against the cpu
   one (pax.releases.compile), record their sha256;
5. regenerate the releases tables (pax.releases.readme) and set pyproject.toml's version to
   X.Y.Z, so the package a release's images install carries the release's number;
6. run the test suite against the new release (`./noxw -s test -- X.Y.Z`);
7. commit releases/X.Y.Z, the tables and pyproject.toml: the cut commit, the release's source;
8. a second commit writes `source = "<cut commit>"` into release.toml (a commit cannot name its
   own hash); branch rX.Y.Z and tag vX.Y.Z point at the cut commit;
9. a third commit records the images' IDs (`record_images`: the noxfile's builds each platform's
   image from the cut commit and writes release.toml's [images]); without it the cut says how
   to record them later (`--record-images`). release.toml says `image_recipe = "source"`: the
   images are built by the release's own tree (pax.images.frozen), so that record never moves.

Any failure before the commit removes releases/X.Y.Z and restores the tables: nothing is
left half-written. The lock compile and the test run are parameters (`compile`, `run_tests`)
so tests can cut a release in a scratch clone without an index.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from pax import git, lockfile, paths
from pax.errors import FAILURE, USAGE, PaxError
from pax.lockfile import version_key
from pax.releases import compile as dist_lock
from pax.releases import readme, source
from pax.releases.catalog import (
    CUT_PYTHONS,
    HEADLINE,
    LOCK_PLATFORMS,
    LOCKS,
    Release,
    UnknownRelease,
    load,
    local_base_image,
    suite_for,
)

VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")
# What a release cut now is built on: the local base of the suite whose python3 it installs on.
CUT_BASE_IMAGE = local_base_image(suite_for(CUT_PYTHONS))


class CutError(PaxError, RuntimeError):
    """The release cannot be cut; the message is one line saying why and what to do."""

    def __init__(self, message: str, exit_code: int = FAILURE):
        super().__init__(message)
        self.exit_code = exit_code  # USAGE for a malformed version


def _git(root: Path, *args: str) -> str:
    try:
        return git.run(*args, root=root)
    except git.GitError as err:
        raise CutError(f"git {' '.join(args)} failed: {err}") from None


def _succeeds(root: Path, *args: str) -> bool:
    try:
        git.run(*args, root=root)
    except git.GitError:
        return False
    return True


def preflight(version: str, root: Path) -> None:
    """Raise CutError unless `version` can be cut from `root` as it is now."""
    if not VERSION_RE.match(version):
        raise CutError(f"version must be X.Y.Z (digits), got {version!r}", exit_code=USAGE)
    if not _succeeds(root, "rev-parse", "--is-inside-work-tree"):
        raise CutError(f"{root} is not a git work tree")
    directory = root / "releases" / version
    if directory.exists():
        raise CutError(
            f"releases/{version} exists already; releases are frozen, cut a new version instead"
        )
    for ref, what in ((f"refs/heads/r{version}", "branch"), (f"refs/tags/v{version}", "tag")):
        if _succeeds(root, "rev-parse", "--verify", "--quiet", ref):
            raise CutError(
                f"{what} {ref.rsplit('/', 1)[1]} exists already; "
                f"releases are frozen, cut a new version instead"
            )
    dirty = _git(root, "status", "--porcelain").splitlines()
    if dirty:
        shown = ", ".join(line[3:] for line in dirty[:3]) + (", ..." if len(dirty) > 3 else "")
        raise CutError(
            f"the git tree is dirty ({len(dirty)} path(s): {shown}); commit or stash first"
        )


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_release_toml(
    version: str,
    date: _dt.date,
    pythons: tuple[str, ...],
    base_image: str,
    resolved_before: _dt.datetime,
    pins: dict[str, str] | None,
) -> str:
    """release.toml without [locks] (pax.releases.compile.record_shas appends that, as the last table)."""
    cutoff = resolved_before.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [
        f"# Pax {version}: cut by ./noxw -s release -- {version}",
        f"version = {_toml_str(version)}",
        f"date = {date.isoformat()}",
        f"branch = {_toml_str('r' + version)}",
        "# The Pythons its locks install on; they are compiled with the first.",
        f"python = [{', '.join(map(_toml_str, pythons))}]",
        "# The base the images are built on ([images] records it by ID; "
        f"PAX_BASE_SUITE={suite_for(pythons)} ci/base-image.sh builds "
        f"{local_base_image(suite_for(pythons))}).",
        f"base_image = {_toml_str(base_image)}",
        "# Its images are built by this tree alone (recipe, in-image check, SBOM and provenance "
        "writers, tools lock), so the IDs [images] records hold for good (docs/releases.md).",
        f"{source.IMAGE_RECIPE} = {_toml_str(source.OWN_TREE)}",
        f"# Locks see only what the index held at this instant, so `./noxw -s lock -- {version}` "
        "reproduces them.",
        f"resolved_before = {cutoff}",
    ]
    if pins is not None:
        listed = ", ".join(f"{n} {pins[n]}" for n in HEADLINE if n in pins)
        lines += [
            'notes = """',
            f"Newest set pip-compile resolved for requirements/ on Python {pythons[0]}, index as "
            f"of {cutoff}:",
            f"{listed}.",
            '"""',
            "",
            f"[versions]  # headline pins, handed to pip-compile as releases/{version}/"
            "constraints.txt",
        ]
        lines += [f"{name} = {_toml_str(pins[name])}" for name in HEADLINE if name in pins]
    return "\n".join(lines) + "\n"


def run_tests_default(version: str, root: Path, log=print) -> int:
    log(f"release: ./noxw -s test -- {version}")
    return subprocess.run(
        [sys.executable, str(root / "noxw"), "-s", "test", "--", version], cwd=root
    ).returncode


def cut(
    version: str,
    root: Path | None = None,
    *,
    skip_tests: bool = False,
    base_image: str | None = None,
    compile=dist_lock.compile_one,
    run_tests=run_tests_default,
    record_images=None,
    now: _dt.datetime | None = None,
    log=print,
) -> Release:
    """Cut `version` in the git work tree `root`; returns the committed release.
    `record_images(version, base_image)` builds the images and writes [images] (RuntimeError when
    it cannot); None leaves that to `--record-images`."""
    root = Path(root or paths.ROOT).resolve()
    preflight(version, root)
    now = now or _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
    base_image = base_image or CUT_BASE_IMAGE
    directory = root / "releases" / version
    pyproject = root / "pyproject.toml"
    tables = {p: p.read_text() for p in [*readme.marked_files(root), pyproject]}
    toml = directory / "release.toml"

    def write_toml(pins: dict[str, str] | None) -> None:
        toml.write_text(
            render_release_toml(
                version, now.astimezone().date(), CUT_PYTHONS, base_image, now, pins
            )
        )

    with _undone_on_failure(directory, tables):
        directory.mkdir(parents=True)
        write_toml(None)
        pins = _newest_pins(version, directory, root, compile, log)
        write_toml(pins)
        _lock_pinned(directory, root, compile, log)
        readme.add_changelog_section(root, version)
        for path in readme.refresh(root, readme.all_files(root)):
            log(f"release {version}: refreshed the releases tables in {path.relative_to(root)}")
        pyproject.write_text(with_package_version(tables[pyproject], version))
        _test(version, root, skip_tests, run_tests, log)
        _commit_cut(version, root, tables)
    rev = _record_source(version, root, toml, log)
    later = f"./noxw -s release -- {version} --record-images"
    if record_images is None:
        log(f"release {version}: image IDs not recorded; {later}")
        return load(directory)
    try:  # the images are built from the cut commit, so only now
        record_images(version, base_image)
        _git(root, "commit", "--quiet", "-m", f"release {version}: image IDs", "--", str(toml))
    except (PaxError, RuntimeError) as err:  # the images' one-line errors, a failed git
        raise CutError(
            f"{version} is cut (source {rev[:12]}) but its image IDs are not recorded "
            f"({err}); once a Docker engine and the base image are up: {later}"
        ) from None
    return load(directory)


@contextlib.contextmanager
def _undone_on_failure(directory: Path, tables: dict[Path, str]):
    """Any failure inside, SIGTERM included, removes the half-cut release and restores `tables`."""
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        on_term = signal.signal(signal.SIGTERM, _terminated)  # so a killed cut cleans up too
    try:
        yield
    except BaseException:
        _undo(directory, tables)
        raise
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, on_term if on_term is not None else signal.SIG_DFL)


def _newest_pins(version: str, directory: Path, root: Path, compile, log) -> dict[str, str]:
    """Lock every platform without pins; the newest matched set every platform resolves becomes
    the pins: each headline package at the lowest version a platform took. A platform's jax
    extra can lag the index (jax[tpu] 0.12.1 wants a libtpu not yet published, so the tpu lock
    takes 0.12.0.1), and the pins must install everywhere."""
    log(
        f"release {version}: resolving the newest set ({', '.join(LOCK_PLATFORMS)}, no pins, "
        f"index as of {load(directory).resolved_before})"
    )
    dist_lock.lock(load(directory), list(LOCK_PLATFORMS), root, log=log, compile=compile)
    resolved = {
        p: lockfile.versions(lockfile.parse_lockfile(directory / f"{p}.txt"))
        for p in LOCK_PLATFORMS
    }
    missing = [n for n in HEADLINE if n not in resolved["cpu"]]
    if missing:
        raise CutError(f"the cpu lock has no {', '.join(missing)}; check requirements/cpu.in")
    pins = {}
    for name in HEADLINE:
        took = {p: found[name] for p, found in resolved.items() if name in found}
        pins[name] = min(took.values(), key=version_key)
        held = sorted(p for p, v in took.items() if v == pins[name])
        if len(set(took.values())) > 1:
            log(
                f"release {version}: {name} {max(took.values(), key=version_key)} is the newest, "
                f"but {' and '.join(held)} resolve {pins[name]}: pinned there"
            )
    log("release {}: pins {}".format(version, ", ".join(f"{n}=={v}" for n, v in pins.items())))
    return pins


def _lock_pinned(directory: Path, root: Path, compile, log) -> None:
    """Every lock with the pins (constraints.txt written, sha256 recorded, pins checked)."""
    shas = dist_lock.lock(load(directory), list(LOCKS), root, log=log, compile=compile)
    release = load(directory)
    if {p: release.recorded_sha256(p) for p in LOCKS} != shas:
        raise CutError("release.toml's [locks] do not match the compiled locks")


def _test(version: str, root: Path, skip_tests: bool, run_tests, log) -> None:
    if skip_tests:
        log(f"release {version}: tests skipped (--skip-tests)")
        return
    code = run_tests(version, root, log=log)
    if code:
        raise CutError(f"tests failed against {version} (exit {code}); nothing was committed")


def _commit_cut(version: str, root: Path, tables: dict[Path, str]) -> None:
    """The cut commit: releases/X.Y.Z and the files among `tables` the cut changed."""
    changed = [str(p.relative_to(root)) for p in tables if p.read_text() != tables[p]]
    committed = [f"releases/{version}", *changed]
    _git(root, "add", "--", *committed)
    _git(root, "commit", "--quiet", "-m", f"release {version}", "--", *committed)


def _record_source(version: str, root: Path, toml: Path, log) -> str:
    """A second commit names the cut commit as the release's source; branch and tag go on it."""
    rev = _git(root, "rev-parse", "HEAD").strip()
    try:
        toml.write_text(source.with_source(toml.read_text(), rev))
        message = f"release {version}: source {rev[:12]}"
        _git(root, "commit", "--quiet", "-m", message, "--", str(toml))
    except (OSError, CutError, source.SourceError) as err:
        raise CutError(
            f"{version} is committed as {rev[:12]} but its source is not recorded "
            f'({err}); add source = "{rev}" to {toml.relative_to(root)} and commit it'
        ) from None
    source.recreate(version, root, log=lambda *_: None)
    log(f"release {version}: source {rev[:12]}, branch r{version} and tag v{version} on it")
    return rev


_PROJECT_VERSION_RE = re.compile(r'(?ms)^(\[project\]\n(?:(?!^\[).)*?^version\s*=\s*)"[^"\n]*"')


def with_package_version(pyproject_text: str, version: str) -> str:
    """pyproject.toml's text with [project] version = "<version>"."""
    text, n = _PROJECT_VERSION_RE.subn(
        lambda m: f'{m.group(1)}"{version}"', pyproject_text, count=1
    )
    if n != 1:
        raise CutError('pyproject.toml has no [project] version = "..." line to set')
    return text


def _terminated(signum, frame):
    raise CutError("terminated (SIGTERM); nothing was committed")


def _undo(directory: Path, tables: dict[Path, str]) -> None:
    """Remove the half-cut release; put back the tables this run rewrote."""
    shutil.rmtree(directory, ignore_errors=True)
    for path, text in tables.items():
        if path.is_file() and path.read_text() != text:
            path.write_text(text)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="./noxw -s release --", description="Cut a release: locks, tests, commit, branch, tag."
    )
    parser.add_argument("version", help="X.Y.Z, new (with --recreate: a cut one)")
    parser.add_argument("--skip-tests", action="store_true", help="do not run the test suite")
    parser.add_argument(
        "--base-image",
        help=f"the base to build and record the images on (default {CUT_BASE_IMAGE})",
    )
    parser.add_argument(
        "--recreate",
        action="store_true",
        help="make branch rX.Y.Z and tag vX.Y.Z at the release's recorded source (refused if "
        "either points elsewhere); cuts nothing",
    )
    return parser.parse_args(argv)


def cut_from_args(
    argv: list[str] | None = None, root: Path | None = None, **kwargs
) -> Release | str:
    """cut() as `X.Y.Z [--skip-tests] [--base-image IMAGE]` asks, or with `--recreate` the
    release's branch and tag (argparse exits 2 on bad arguments)."""
    args = parse_args(argv)
    if args.recreate:
        try:
            return source.recreate(args.version, root, log=kwargs.get("log", print))
        except (source.SourceError, UnknownRelease) as err:
            raise CutError(f"{err}") from None
    return cut(args.version, root, skip_tests=args.skip_tests, base_image=args.base_image, **kwargs)
