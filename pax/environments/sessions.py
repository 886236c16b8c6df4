"""How every `./noxw -s` session ends: with its command's own exit status, and a failure said in
one line.

nox turns any failure into exit 1 and adds lines of its own (`Command ... failed`, `Session ...
aborted`). A session instead exits as the command it ran did (pax.errors: 0 done, 1 failed,
2 bad input, 75 preempted, 125 cannot judge), so scripts and bisect can tell them apart; the
command has already said why on one line. A package's error in the session itself is that
line, `SESSION: error: MESSAGE`, with the error's own status. No nox here: sessions pass their
name and their log.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import shlex
import subprocess
from collections.abc import Callable, Iterator, Sequence

from pax.errors import PaxError, UsageError, report


@contextlib.contextmanager
def one_line(program: str) -> Iterator[None]:
    """A PaxError inside ends the process: `PROGRAM: error: MESSAGE` and the error's status."""
    try:
        yield
    except PaxError as err:
        raise SystemExit(report(program, err)) from None


def run(
    command: Sequence[str],
    env: dict[str, str] | None = None,
    log: Callable[[str], None] | None = None,
) -> None:
    """Run `command` with `env` added to this environment; a non-zero status ends the process
    with that status and nothing more said (the command said why)."""
    if log:
        log(shlex.join(map(str, command)))
    code = subprocess.call([str(c) for c in command], env={**os.environ, **(env or {})})
    if code:
        raise SystemExit(code)


def status(code: int) -> None:
    """End the process with a command's non-zero status (a package's `main` that returned it)."""
    if code:
        raise SystemExit(code)


def flags(args: Sequence[str], allowed: set[str], usage: str) -> set[str]:
    """The flags of a session that takes nothing else; UsageError naming any other word."""
    unknown = [a for a in args if a not in allowed]
    if unknown:
        raise UsageError(f"unexpected {' '.join(unknown)}; usage: {usage}")
    return set(args)


def check_selected(requested: Sequence[str], known: Sequence[str]) -> None:
    """UsageError naming a requested session that is none of `known`. nox's own answer is exit
    3 among lines of its own, a status a session's command may return too (pytest's internal
    error), so the wrapper asks first."""
    unknown = [name for name in requested if name not in known]
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UsageError(
            f"unknown session {unknown[0]!r}{hint}; sessions: {', '.join(sorted(known))}"
        )
