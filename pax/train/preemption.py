"""SIGTERM/SIGINT during training: the loop finishes the step, saves and stops, at one step that
every process agrees on.

One process: the signal handler sets a flag that the loop reads after each step.

Several processes: a scheduler may signal only some hosts, or signal them on either side of a
step boundary; a process that stops alone leaves the others waiting in the next step's
collectives, and the collective save never completes. jax's preemption service (the one orbax's
CheckpointManager.reached_preemption and MaxText use) settles it: jax.distributed.initialize
installs a SIGTERM notifier in every process, a notice on any host is spread through the
coordination service, every process reports how far it got, and
multihost_utils.reached_preemption_sync_point(i) is true on all of them at the same i, one past
the furthest. So with several processes the loop leaves SIGTERM to jax (a Python handler would
replace jax's) and forwards SIGINT to it as a SIGTERM.

The loop keeps one step queued behind the one the devices run (loop.py), so the step it saves
is the one running when the signal came or the next one.

Decoding and evaluating have nothing to save: `interrupting` stops them where they are.
"""

import contextlib
import os
import signal

import jax
from jax.experimental import multihost_utils

from pax.errors import UsageError

EXIT_PREEMPTED = 75  # EX_TEMPFAIL: "try again"; rerunning the same command resumes


class Preempted(Exception):
    """Training stopped on a signal after saving a checkpoint at `step`."""

    def __init__(self, step: int, reason: str):
        super().__init__(
            f"{reason} at step {step}: checkpoint saved; rerun the same command to resume"
        )
        self.step = step


class Interrupted(BaseException):
    """A signal stopped a command that saves nothing (decoding, evaluating). Not an Exception,
    as KeyboardInterrupt is not: code that takes any Exception for a checkpoint that does not
    read back must not take a signal for one."""

    def __init__(self, name: str):
        super().__init__(name)
        self.signal = name


@contextlib.contextmanager
def interrupting():
    """Within, the first SIGTERM or SIGINT raises Interrupted where the program is (once the
    jax call it may be waiting in returns); later ones are ignored, so clean-up runs whole."""
    received = []

    def handle(signum, _frame):
        if not received:
            received.append(signum)
            raise Interrupted(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        if received:  # straight to ignoring: the previous handler would meet a second signal
            ignore_signals()
        else:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def ignore_signals() -> None:
    """SIGTERM and SIGINT ignored from here on, for a process on its way out after a stop: a
    terminal's ^C reaches it twice through ./noxw (the group's, then the wrapper's forward), and
    the second must not cut the exit short."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)


class SignalCatcher:
    """Within `with`, SIGTERM and SIGINT ask the loop to stop; `stop_at(i)` (call it after every
    step, i counting the steps this process has run, from 1) says when, the same i on every
    process."""

    def __init__(self):
        self.requested = None  # the signal this process received, by name
        self._collective = jax.process_count() > 1
        self._previous = {}

    def _handle(self, signum, _frame):
        self.requested = signal.Signals(signum).name
        if self._collective:
            os.kill(os.getpid(), signal.SIGTERM)  # to jax's notifier, which tells the others

    def __enter__(self):
        signals = (signal.SIGINT,) if self._collective else (signal.SIGTERM, signal.SIGINT)
        if self._collective:
            try:  # iteration 0: no step run yet, which is also where jax's count starts
                multihost_utils.reached_preemption_sync_point(0)
            except RuntimeError as e:  # the service is off (jax_enable_preemption_service)
                raise UsageError(
                    f"a multi-process run agrees on its stop step through jax's preemption "
                    f"service ({e}); leave jax_enable_preemption_service on"
                ) from None
        for sig in signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def stop_at(self, iteration: int) -> bool:
        """Whether to save and stop after this process's `iteration`-th step.

        Counted per run rather than by global step: jax's protocol takes the count a process
        last reported (0 before its first call), so a notice that lands while restoring or
        compiling still stops every process after its first step."""
        if self._collective:
            return multihost_utils.reached_preemption_sync_point(iteration)
        return self.requested is not None

    def reason(self) -> str:
        if self._collective:
            return f"a preemption notice (SIGTERM to any of the {jax.process_count()} processes)"
        return self.requested
