"""Bisect a breakage over the package changes between two lockfiles.

  python -m pax.bisect --good A --bad B [--platform cpu] [options] -- COMMAND...
  (nox: ./noxw -s bisect -- --good 1.3.0 --bad 1.4.0 -- python -c "import jax")

A and B: a release, a lockfile path or GITREV:path (see pax.releases.diff), or `image`: inside a
pax image, the lock it was built from ($PAX_LOCKFILE). The search:

1. diff the locks into changes and group what must move together: jax, jaxlib, the jax
   plugins and libtpu; each `nvidia-*-cuNN` family; every `--group a,b` the user gives.
   Groups are ordered dependencies first (from the wheels' metadata), then by name.
2. confirm the endpoints: COMMAND passes in an env built exactly from GOOD, fails in BAD.
3. binary-search the prefixes GOOD + groups[:k]; a candidate that cannot be installed or
   fails `pip check` is skipped (like `git bisect skip`) and a neighbour is tried instead.
4. check the culprit alone on top of GOOD; if it passes alone, search the groups before it
   for the smallest set that breaks together with it.
5. with --versions, when one package breaks alone: list the releases the index published
   between its GOOD and BAD versions (pax.environments.index) and bisect them, each on top of GOOD,
   to name the first bad release (pre-releases only when an endpoint is one).

Each env is built from one shared, hash-verified wheel cache with `--no-deps` installs, and
reused between steps (only what differs is reinstalled). COMMAND runs in it (its bin/ first
on PATH, pax importable: the checkout, or in an image the installed pax alone, on
PYTHONPATH), with a timeout; exit 0 is good, 125 is skip (as in `git
bisect run`), anything else (a timeout too) is bad. `--retries N` runs each step up to N+1
times; the verdict is the strict majority (no majority: skip).

Output folder: report.txt, report.json, steps.jsonl, and one log per step. Exit status:
0 culprit found; 1 endpoints do not reproduce or nothing could be isolated; 2 usage error.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import os
import shutil
import sys
import time
from pathlib import Path

from pax.bisect.groups import make_groups, order_groups
from pax.bisect.report import format_report
from pax.bisect.search import Bisector
from pax.environments import index
from pax.environments.wheelcache import EnvBuilder, WheelCache
from pax.releases import catalog as dist_release
from pax.releases import diff as dist_diff


def _default_platform() -> str:
    platform = os.environ.get("PAX_PLATFORM", "")
    return platform if platform in dist_release.LOCK_PLATFORMS else "cpu"


def checkout() -> Path | None:
    """The source checkout pax runs from; None when pax is installed (as in an image)."""
    root = dist_release.REPO_ROOT
    return root if (root / "pyproject.toml").is_file() else None


def import_root(folder: Path) -> Path:
    """A PYTHONPATH entry that lets COMMAND import pax in any candidate: the checkout, else
    `folder` holding only a link to the installed pax (its site-packages would shadow the
    candidate's packages)."""
    root = checkout()
    if root is not None:
        return root
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "pax"
    if not link.exists():
        link.symlink_to(Path(__file__).resolve().parents[1], target_is_directory=True)
    return folder


def parse_args(argv: list[str]) -> argparse.Namespace:
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    else:
        command = []
    parser = argparse.ArgumentParser(
        prog="python -m pax.bisect",
        usage="%(prog)s --good A --bad B [--platform cpu] [options] -- COMMAND...",
        description="Find the package change between two lockfiles that breaks COMMAND.",
    )
    parser.add_argument(
        "--good",
        required=True,
        help="release, lockfile path, GITREV:path, or `image` ($PAX_LOCKFILE)",
    )
    parser.add_argument(
        "--bad",
        required=True,
        help="release, lockfile path, GITREV:path, or `image` ($PAX_LOCKFILE)",
    )
    parser.add_argument(
        "--platform",
        default=_default_platform(),
        choices=dist_release.LOCK_PLATFORMS,
        help="which lock of a release (default: $PAX_PLATFORM, else cpu)",
    )
    parser.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="A,B",
        help="packages that must move together (repeatable)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=0,
        metavar="N",
        help="run each step up to N+1 times; the verdict is the majority",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="per run of COMMAND; a timeout counts as bad (default 3600)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="output folder (default runs/bisect/<time>, "
        "under the checkout, else under the current folder)",
    )
    parser.add_argument(
        "--cache", type=Path, help="wheel cache (default .venv/bisect/wheels, likewise)"
    )
    parser.add_argument("--env", type=Path, help="the working venv (default OUT/env)")
    parser.add_argument("--keep-env", action="store_true", help="keep the venv at the end")
    parser.add_argument("--installer", choices=("pip", "uv"), default="pip")
    parser.add_argument("--index-url", help="index to fetch wheels from (default: pip's)")
    parser.add_argument(
        "--find-links",
        action="append",
        default=[],
        metavar="DIR",
        help="fetch wheels from this folder (with --no-index: only from it)",
    )
    parser.add_argument("--no-index", action="store_true")
    parser.add_argument(
        "--versions",
        action="store_true",
        help="then, within a single culprit package, bisect the releases the "
        "index published between its GOOD and BAD versions",
    )
    args = parser.parse_args(argv)
    if not command:
        parser.error("name the COMMAND after `--`, e.g. -- python -c 'import jax'")
    if args.retries < 0:
        parser.error("--retries must be 0 or more")
    args.command = command
    return args


def main(argv: list[str] | None = None, log=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    log = log or (lambda msg: print(f"bisect: {msg}", flush=True))
    try:
        args = parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        good = dist_diff.load(args.good, args.platform)
        bad = dist_diff.load(args.bad, args.platform)
    except dist_diff.LockSpecError as err:
        print(f"bisect: {err}", file=sys.stderr)
        return 2
    root = checkout() or Path.cwd()
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = (args.out or root / "runs" / "bisect" / stamp).resolve()
    if out.exists() and any(out.iterdir()):
        print(f"bisect: output folder {out} is not empty; name another with --out", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    find_links = [d if "://" in d else str(Path(d).resolve()) for d in args.find_links]
    index_args = (
        (["--index-url", args.index_url] if args.index_url else [])
        + [a for d in find_links for a in ("--find-links", d)]
        + (["--no-index"] if args.no_index else [])
    )
    started = time.monotonic()
    changes = dist_diff.diff(good.pins, bad.pins)
    cache = WheelCache(
        (args.cache or root / ".venv" / "bisect" / "wheels").resolve(), index_args, log=log
    )
    try:
        builder = EnvBuilder((args.env or out / "env").resolve(), cache, args.installer, log=log)
        cache.fetch(sorted({*good.pins.values(), *bad.pins.values()}, key=lambda p: p.name))
    except RuntimeError as err:  # no installer to be had
        print(f"bisect: {err}", file=sys.stderr)
        out.rmdir()  # still empty: nothing half-written
        return 2
    groups = order_groups(
        make_groups(changes, [g.split(",") for g in args.group], log=log), cache.requires
    )
    pythonpath = out / ".pythonpath"
    bis = Bisector(
        good,
        bad,
        groups,
        args.command,
        builder,
        out,
        retries=args.retries,
        timeout=args.timeout,
        pythonpath=import_root(pythonpath),
        log=log,
    )
    try:
        result = bis.run()
        if args.versions:
            result["versions"] = bis.walk_versions(
                result,
                functools.partial(
                    index.published,
                    index_url=args.index_url,
                    find_links=find_links,
                    no_index=args.no_index,
                ),
            )
    finally:
        shutil.rmtree(pythonpath, ignore_errors=True)
        if not args.keep_env:
            builder.discard()
    seconds = time.monotonic() - started
    text = format_report(good, bad, bis, result, args.command, seconds)
    report = {
        **result,
        "good": good.label,
        "bad": bad.label,
        "command": args.command,
        "steps": [s.as_json() for s in bis.steps],
        "env_builds": len(bis.steps),
        "builds": bis.builds,
        "missing_wheels": cache.missing,
        "seconds": round(seconds, 1),
    }
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.txt").write_text(text + "\n")
    print(text, flush=True)
    return 0 if result["status"] == "found" else 1
