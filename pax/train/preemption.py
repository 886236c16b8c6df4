"""SIGTERM/SIGINT during training: note the request, let the loop finish the step and save."""

import signal

EXIT_PREEMPTED = 75  # EX_TEMPFAIL: "try again"; rerunning the same command resumes


class Preempted(Exception):
    """Training stopped on a signal after saving a checkpoint at `step`."""

    def __init__(self, step: int, signal_name: str):
        super().__init__(
            f"{signal_name} at step {step}: checkpoint saved; rerun the same command to resume"
        )
        self.step = step


class SignalCatcher:
    """Within `with`, SIGTERM and SIGINT set `requested` instead of killing the process."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.requested = None
        self._previous = {}

    def _handle(self, signum, _frame):
        self.requested = signal.Signals(signum).name

    def __enter__(self):
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
