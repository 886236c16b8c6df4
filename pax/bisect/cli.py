"""Bisect a breakage over the package changes between two lockfiles.

  python -m pax.bisect --good A --bad B [--platform cpu] [options] -- COMMAND...
  (nox: ./noxw -s bisect -- --good 1.3.0 --bad 1.4.0 -- python -c "import jax")

A and B: a release, a lockfile path or GITREV:path (see pax.releases.diff), or `image`: inside a
pax image, the lock it was built from ($PAX_LOCKFILE).

1. Every wheel of GOOD and BAD is fetched and hash-checked once, up front, into the wheel
   cache; a wheel that cannot be had stops the run there, before any env is built.
2. The changes are grouped as they must move together (pax.bisect.groups) and ordered,
   dependencies first; pax.bisect.search judges candidates GOOD + some groups: the endpoints,
   a binary search over prefixes (uninstallable candidates skipped, as `git bisect skip`), and
   the culprit confirmed on fresh verdicts (alone on GOOD fails; BAD without it passes).
3. With --versions, when one package breaks alone: the releases the index published between
   its GOOD and BAD versions are walked the same way, each on top of GOOD.

GOOD and BAD may name different Pythons (a release's `python`, a lock's pip-compile header, or
--good-python/--bad-python): then the interpreter's move is one more change, searched first, and
a candidate runs on BAD's interpreter where it is applied (pax.bisect.pythons).

COMMAND runs in each candidate env (pax.bisect.steps) with a timeout: exit 0 passes, 125 skips
(as in `git bisect run`), anything else fails; but exit 2 on GOOD (bad input: a mistyped
argument is the same at every step) stops the bisect with the command's own line. A verdict takes up to `--retries N` + 1 runs
under pax.bisect.rule: good as soon as `--passes K` (default 1) runs pass, bad once K can no
longer be reached; `--flaky` is 5 runs, any pass. The report says which verdicts were mixed.

Progress goes to stdout; the report to stderr, its verdict the first and the last line (an
input error: one line). The command line (flags, GOOD and BAD, a COMMAND path, --out) is checked
before anything is made; what needs the wheels (one that cannot be had, a COMMAND name no
package installs) is found after they are fetched, and recorded in the report. Output folder (default $XDG_CACHE_HOME/pax/bisect/<time>, ~/.cache when
unset): report.txt, report.json, steps.jsonl, one log per step. Exit status: 0 culprit found
and confirmed; 1 no confirmed culprit (endpoints do not reproduce, unconfirmed, or another
change breaks BAD too); 2 the tool's inputs (usage, locks, Pythons, wheels, index, COMMAND).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

from pax import paths
from pax.bisect import pythons as bisect_pythons
from pax.bisect import search as bisect_search
from pax.bisect.groups import make_groups, order_groups, python_group
from pax.bisect.report import Findings, format_report, report_json
from pax.bisect.rule import FLAKY, Rule
from pax.bisect.steps import InputError, Trials
from pax.environments import index
from pax.errors import ArgumentParser, UsageError, report
from pax.lockfile import Lock
from pax.pip import user_cache_dir
from pax.releases import catalog as dist_release
from pax.releases import diff as dist_diff

PROGRAM = "pax bisect"  # its errors: `pax bisect: error: MESSAGE`, one line
_VENV_PYTHONS = ("python", "python3", f"python3.{sys.version_info.minor}")


def _default_platform() -> str:
    platform = os.environ.get("PAX_PLATFORM", "")
    return platform if platform in dist_release.LOCK_PLATFORMS else "cpu"


def checkout() -> Path | None:
    """The source checkout pax runs from; None when pax is installed (as in an image)."""
    root = paths.ROOT
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
        link.symlink_to(paths.PACKAGE, target_is_directory=True)
    return folder


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The options before `--`, with COMMAND (the words after it) and the verdict rule."""
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    else:
        command = []
    parser = _parser()
    args = parser.parse_args(argv)
    if not command:
        parser.error("name the COMMAND after `--`, e.g. -- python -c 'import jax'")
    args.rule = _rule(args, parser)
    args.command = command
    return args


def _rule(args: argparse.Namespace, parser: ArgumentParser) -> Rule:
    """The verdict rule --flaky, --retries and --passes ask for; a usage error when they clash."""
    if args.flaky and (args.retries is not None or args.passes is not None):
        parser.error("--flaky is --retries 4 --passes 1: give either the preset or the numbers")
    if args.retries is not None and args.retries < 0:
        parser.error("--retries must be 0 or more")
    runs = (args.retries or 0) + 1
    if args.passes is not None and not 1 <= args.passes <= runs:
        parser.error(f"--passes must be between 1 and the {runs} run(s) --retries allows")
    return FLAKY if args.flaky else Rule(runs, args.passes or 1)


def _parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pax.bisect",
        usage="%(prog)s --good A --bad B [--platform cpu] [options] -- COMMAND...",
        description="Find the package change between two lockfiles that breaks COMMAND.",
    )
    lock_help = "release, lockfile path, GITREV:path, or `image` ($PAX_LOCKFILE)"
    parser.add_argument("--good", required=True, help=lock_help)
    parser.add_argument("--bad", required=True, help=lock_help)
    parser.add_argument(
        "--platform",
        default=_default_platform(),
        choices=dist_release.LOCK_PLATFORMS,
        help="which lock of a release (default: $PAX_PLATFORM, else cpu)",
    )
    for end in ("good", "bad"):
        parser.add_argument(
            f"--{end}-python",
            type=bisect_pythons.version,
            metavar="X.Y",
            help=f"the Python {end.upper()} runs on (default: its release's, else its lock "
            "header's `with Python X.Y`)",
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
        metavar="N",
        help="up to N+1 runs of COMMAND per verdict: good as soon as --passes of them pass, "
        "bad once that cannot happen (default 0)",
    )
    parser.add_argument(
        "--passes",
        type=int,
        metavar="K",
        help="passing runs that make a verdict good (default 1: a flake fails, a break never "
        "passes); raise it when a broken env can pass by chance",
    )
    parser.add_argument(
        "--flaky",
        action="store_true",
        help=f"preset for a flaky COMMAND: {FLAKY.describe()} (--retries 4 --passes 1)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="per run of COMMAND; a timeout counts as bad (default 3600)",
    )
    parser.add_argument(
        "--out", type=Path, help="output folder (default $XDG_CACHE_HOME/pax/bisect/<time>)"
    )
    parser.add_argument(
        "--cache", type=Path, help="wheel cache (default $XDG_CACHE_HOME/pax/wheels)"
    )
    parser.add_argument(
        "--env",
        type=Path,
        help="the working venv (default OUT/env; across Pythons, ENV-pythonX.Y for each)",
    )
    parser.add_argument("--keep-env", action="store_true", help="keep the venv at the end")
    parser.add_argument(
        "--installer",
        choices=("auto", "pip", "uv"),
        default="auto",
        help="what installs each candidate venv (default: uv where ./noxw's tools have it, else pip)",
    )
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
    return parser


def default_out() -> Path:
    """A new folder under the user's cache, one per run."""
    base = user_cache_dir("bisect")
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out, n = base / stamp, 1
    while out.exists():
        n += 1
        out = base / f"{stamp}-{n}"
    return out


def _load(flag: str, spec: str, platform: str) -> Lock:
    try:
        return dist_diff.load(spec, platform)
    except dist_diff.LockSpecError as err:
        raise InputError(f"{flag} {err}") from None


def check_command(command: list[str], cwd: Path) -> None:
    """What can be told before any env exists: a COMMAND path that is not there or cannot run.
    (A bare name is checked against the wheels, once they are fetched.)"""
    words = command
    if len(command) == 1:  # a shell line: its first word, when it parses as one
        try:
            words = shlex.split(command[0])
        except ValueError:
            return  # the shell will say (126/127 on its first run)
    name = words[0] if words else ""
    if os.sep not in name:
        return
    path = cwd / name
    if not path.exists():
        raise InputError(f"COMMAND {name}: no such file (from {cwd})")
    if not path.is_file() or not os.access(path, os.X_OK):
        raise InputError(
            f"COMMAND {name} is not executable: chmod +x it, or run it through its "
            f"interpreter (-- bash {name}, -- python {name})"
        )


def check_command_name(command: list[str], scripts: set[str], log) -> None:
    """A bare COMMAND name must come from GOOD's env (a python, or a package's script) or PATH."""
    if len(command) == 1 or os.sep in command[0]:
        return
    name = command[0]
    if name in _VENV_PYTHONS or name in scripts:
        return
    found = shutil.which(name)
    if found is None:
        raise InputError(
            f"COMMAND {name!r} not found: not on PATH, and no package in GOOD installs it; "
            "check its spelling, or add its package to the lock"
        )
    log(
        f"note: COMMAND {name} is {found}, from outside the candidate envs (no package in GOOD "
        "installs it)"
    )


def _locks(args: argparse.Namespace) -> tuple[Lock, Lock, list]:
    """GOOD's and BAD's locks and the changes between them; InputError for what the command
    line gets wrong (checked before the output folder is made)."""
    good = _load("--good", args.good, args.platform)
    bad = _load("--bad", args.bad, args.platform)
    changes = dist_diff.diff(good.pins, bad.pins)
    if not changes:
        raise InputError("GOOD and BAD pin the same packages: nothing to bisect")
    check_command(args.command, Path.cwd())
    return good, bad, changes


def _bisect(args: argparse.Namespace, locks, run: Findings, out: Path, log) -> None:
    good, bad, changes = locks
    run.good, run.bad = good.label, bad.label
    cwd = Path.cwd()
    find_links = [d if "://" in d else str(Path(d).resolve()) for d in args.find_links]
    cache_dir = (args.cache or user_cache_dir("wheels")).resolve()
    pythons = run.pythons = bisect_pythons.resolve(good, bad, args)
    wheels = dict(
        directory=cache_dir, index_url=args.index_url, find_links=find_links, no_index=args.no_index
    )
    try:
        env = (args.env or out / "env").resolve()
        builders = bisect_pythons.builders(pythons, wheels, env, args.installer, log)
        problems = bisect_pythons.fetch(builders, pythons, good, bad, log)
    except RuntimeError as err:  # no installer, no pip to be had
        raise InputError(str(err)) from None
    cache = builders[pythons.good].cache
    if problems:
        run.wheel_problems = [p.as_json() for p in problems]
        more = f" (and {len(problems) - 1} more: see report.json)" if len(problems) > 1 else ""
        raise InputError(problems[0].message + more)
    check_command_name(
        args.command, set().union(*(cache.scripts(p) for p in good.pins.values())), log
    )
    groups = make_groups(changes, [g.split(",") for g in args.group], log=log)
    if pythons.moved:
        groups.append(python_group(pythons.good, pythons.bad))
    groups = order_groups(groups, cache.requires)
    run.groups = groups
    pythonpath = out / ".pythonpath"
    trials = Trials(
        good.pins,
        groups,
        args.command,
        builders,
        out,
        args.rule,
        timeout=args.timeout,
        cwd=cwd,
        pythonpath=import_root(pythonpath),
        log=log,
    )
    run.trials = trials
    verdicts = bisect_search.Verdicts(trials, log=log)
    n = len(groups)
    log(f"{n} group(s) of changes; rule: {args.rule.describe()}; Python {pythons.describe()}")
    for number, group in enumerate(groups, 1):
        log(f"  {number:>3}. {group.describe()}")
    try:
        run.outcome = bisect_search.Bisection(n, verdicts, log=log).run()
        if args.versions:
            before = len(trials.steps)
            walk = bisect_search.walk_versions(
                run.outcome,
                groups,
                verdicts,
                functools.partial(
                    index.published,
                    index_url=args.index_url,
                    find_links=find_links,
                    no_index=args.no_index,
                ),
                log=log,
            )
            run.versions = _walk_report(walk, trials, trials.steps[before:])
    finally:
        run.contested = [trials.label(s) for s in verdicts.contested()]
        shutil.rmtree(pythonpath, ignore_errors=True)
        if not args.keep_env:
            for builder in builders.values():
                builder.discard()


def _walk_report(walk: dict, trials: Trials, walked: list) -> dict:
    """The walk's result with the steps it took: env builds, skipped releases and why."""
    states = walk.pop("states", None)
    if states:
        walk["last_good_step"] = trials.history[states[0]][-1].number
        walk["first_bad_step"] = trials.history[states[1]][-1].number
    walk["env_builds"] = sum(s.built for s in walked)
    walk["skipped"] = {
        s.pin.split("==", 1)[1]: s.reason for s in walked if s.verdict == "skip" and s.pin
    }
    return walk


def main(argv: list[str] | None = None, log=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    log = log or (lambda msg: print(f"bisect: {msg}", flush=True))
    try:  # what the command line says is checked before anything is made
        args = parse_args(argv)
        locks = _locks(args)
        out = (args.out or default_out()).resolve()
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise UsageError(f"output folder {out} is not empty; name another with --out")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UsageError(f"cannot make the output folder {out}: {err.strerror}") from None
    except UsageError as err:  # an InputError too
        return report(PROGRAM, err)
    log(f"output folder {out}")
    run = Findings(out, args.command, args.rule)
    started = time.monotonic()

    def write_report() -> str:
        run.seconds = time.monotonic() - started
        text = format_report(run)
        (out / "report.json").write_text(json.dumps(report_json(run), indent=2) + "\n")
        (out / "report.txt").write_text(text + "\n")
        return text

    try:
        _bisect(args, locks, run, out, log)
    except InputError as err:
        run.error = str(err)
    except BaseException as err:  # interrupted, or a bug: the report still says how far it got
        run.error = "interrupted" if isinstance(err, KeyboardInterrupt) else f"stopped: {err!r}"
        write_report()
        raise
    text = write_report()
    if run.error:
        report(PROGRAM, run.error)
    else:
        print(text, file=sys.stderr, flush=True)
    return run.exit_code
