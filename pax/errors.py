"""The one exception base for what a command cannot do, and the one way a command reports it.

Every error a user can meet is a PaxError whose message names the problem and the fix; its
class carries the exit status, so every entry point (pax.main, the package CLIs, the noxfile)
catches this one type, prints `PROGRAM: error: MESSAGE` on one line and exits with that status.
Standard library only: every layer imports it.
"""

from __future__ import annotations

import argparse
import sys

FAILURE = 1  # the work was tried and failed
USAGE = 2  # bad input: nothing was tried
CANNOT_JUDGE = 125  # `git bisect run`'s "skip": this step says nothing either way


class PaxError(Exception):
    """A failure with the fix in the message."""

    exit_code = FAILURE


class UsageError(PaxError):
    """A problem with what the user asked for, with the fix in the message."""

    exit_code = USAGE


class CannotJudge(PaxError):
    """What was to be judged is not there (a crashed run, no metrics yet)."""

    exit_code = CANNOT_JUDGE


def last_line(*outputs: str | bytes | None, default: str = "") -> str:
    """The last non-blank line of a command's output (stderr first, then stdout): where tools
    say why they failed, and what a one-line error quotes."""
    for text in outputs:
        if isinstance(text, bytes):
            text = text.decode(errors="replace")
        lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
        if lines:
            return lines[-1]
    return default


def report(program: str, err: BaseException, file=None) -> int:
    """Print `PROGRAM: error: MESSAGE` on stderr; the exit status for `err`."""
    print(f"{program}: error: {err}", file=file or sys.stderr, flush=True)
    return getattr(err, "exit_code", FAILURE)


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are a UsageError (one line, `(see --help)`), not its usage
    block and exit: the command's own `report` prints it."""

    def parse_known_args(self, args=None, namespace=None):
        self._given = sys.argv[1:] if args is None else list(args)
        return super().parse_known_args(args, namespace)

    def _problem(self, message: str) -> str:
        """argparse names a missing required argument before an unknown flag, so `--bogus`
        alone would read as a missing subcommand; the unknown flag is the likelier mistake."""
        if message.startswith("the following arguments are required"):
            flags = (a for a in getattr(self, "_given", ()) if a.startswith("--"))
            unknown = [a for a in flags if a.split("=", 1)[0] not in self._option_string_actions]
            if unknown:
                return f"unrecognized arguments: {' '.join(unknown)}"
        return message

    def error(self, message):
        raise UsageError(f"{self._problem(message)} (see --help)")


class ExitingArgumentParser(ArgumentParser):
    """For a command run on its own (`python -m ...`): a usage error is printed as one line,
    `PROG: error: MESSAGE (see --help)`, and exits 2, instead of argparse's usage block."""

    def error(self, message):
        sys.exit(report(self.prog, UsageError(f"{self._problem(message)} (see --help)")))
