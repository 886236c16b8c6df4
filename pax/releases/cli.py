"""`python -m pax.releases COMMAND ...`: the release commands, as nox's sessions run them.

  lock RELEASE|nightly|tools [PLATFORM...]             compile locks        (./noxw -s lock)
  cut X.Y.Z [--skip-tests] [--base-image IMAGE]        cut a release        (./noxw -s release)
  diff A B [--platform P] [--json]                     diff two locks       (./noxw -s diff)

Each exits 0 when done, 1 when it failed and 2 on bad input, saying why on one line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pax.errors import ArgumentParser, PaxError, UsageError, report
from pax.releases import catalog
from pax.releases import compile as lock_compile
from pax.releases import cut as release_cut
from pax.releases import diff as lock_diff


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m pax.releases",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the command's own")
    try:
        args = parser.parse_args(argv)
    except UsageError as err:
        return report(parser.prog, err)
    return COMMANDS[args.command](args.args)


def lock(argv: list[str], root: Path | None = None, log=print) -> int:
    """`lock RELEASE|nightly|tools [PLATFORM...]`: 0 when every lock compiled."""
    try:
        lock_compile.lock_from_args(argv, root, log=log)
    except PaxError as err:
        return report("pax lock", err)
    return 0


def cut(argv: list[str] | None = None, root: Path | None = None, **kwargs) -> int:
    """`cut X.Y.Z [--skip-tests] [--base-image IMAGE] [--recreate]`: 0 when cut."""
    try:
        release_cut.cut_from_args(argv, root, **kwargs)
    except RuntimeError as err:  # CutError, a failed pip-compile, a pin the lock does not honour
        return report("pax release", err)
    return 0


def diff(argv: list[str] | None = None) -> int:
    """`diff A B [--platform P] [--json]`: the changes from lock A to lock B; 0, or 2 on bad input."""
    parser = argparse.ArgumentParser(
        prog="pax.releases.diff",
        description="Diff two lockfiles or releases.",
        epilog="A and B: a release (1.4.0, nightly), a lockfile path, or GITREV:path/to/lock.txt",
    )
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument(
        "--platform",
        default="cpu",
        choices=catalog.LOCK_PLATFORMS,
        help="which lock of a release (default: cpu)",
    )
    parser.add_argument("--json", action="store_true", help="print the changes as JSON")
    args = parser.parse_args(argv)
    try:
        a, b = lock_diff.load(args.a, args.platform), lock_diff.load(args.b, args.platform)
    except lock_diff.LockSpecError as err:
        return report("pax diff", err)
    changes = lock_diff.diff(a.pins, b.pins)
    if args.json:
        print(
            json.dumps(
                {"a": a.label, "b": b.label, "changes": [c.as_json() for c in changes]}, indent=2
            )
        )
    else:
        print(lock_diff.format_diff(a, b, changes))
    return 0


COMMANDS = {"lock": lock, "cut": cut, "diff": diff}
