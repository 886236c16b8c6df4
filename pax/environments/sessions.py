"""How every `./noxw -s` session ends: with its command's own exit status, and a failure said in
one line.

nox turns any failure into exit 1 and adds lines of its own (`Command ... failed`, `Session ...
aborted`). A session instead exits as the command it ran did (pax.errors: 0 done, 1 failed,
2 bad input, 75 preempted, 125 cannot judge), so scripts and bisect can tell them apart; the
command has already said why on one line. A package's error in the session itself is that
line, `SESSION: error: MESSAGE`, with the error's own status. No nox here: sessions pass their
name and their log.

A session's command runs in the foreground: SIGINT and SIGTERM reach it (`call`), the session
waits for it to end, and ends with its status, as the command run by hand would.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import shlex
import signal
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
    code = call(command, {**os.environ, **(env or {})})
    if code:
        raise SystemExit(code)


PASSED_ON = (signal.SIGINT, signal.SIGTERM)
SI_KERNEL = 0x80  # Linux's si_code of a signal the kernel sent: a terminal's ^C to its group


def call(command: Sequence[str], env: dict[str, str] | None = None, cwd=None) -> int:
    """Run `command` (`env`: its whole environment, None for this one's) to its end; its exit
    status, 128+N where signal N killed it (as a shell says).

    SIGINT and SIGTERM that reach this process are passed on to the command, which decides what
    they mean (pax.main saves and exits 75), and this process waits for it: subprocess.call
    would instead raise KeyboardInterrupt here and kill the command a quarter second later, and
    a SIGTERM would end this process and leave the command running. A terminal's ^C, which the
    kernel sends to the whole foreground process group, has reached the command already and is
    not sent twice. A process that signals the group (killpg) rather than this process alone
    cannot be told apart from one that signals this process alone, so the command then gets
    the signal twice; pax.main takes a second one as the first."""
    early: list[int] = []  # signals that come while the command starts: it may not have them
    previous = {sig: signal.signal(sig, lambda sig, _: early.append(sig)) for sig in PASSED_ON}
    try:
        child = subprocess.Popen([str(c) for c in command], env=env, cwd=cwd)
        # Blocked only now: the command inherits this process's signal mask. Blocked, they wait
        # for sigtimedwait, whose si_code tells a terminal's signal from a process's.
        waited = {*PASSED_ON, signal.SIGCHLD}
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
        try:
            while True:
                while early:
                    child.send_signal(early.pop(0))
                if child.poll() is not None:
                    break
                # The timeout only bounds the wait for a signal another thread took (`early`).
                info = signal.sigtimedwait(waited, 1.0)
                if info is None or info.si_signo == signal.SIGCHLD:
                    continue
                from_terminal = info.si_code == SI_KERNEL
                if not from_terminal or os.getpgid(child.pid) != os.getpgrp():
                    child.send_signal(info.si_signo)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    code = child.returncode
    return 128 - code if code < 0 else code


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
