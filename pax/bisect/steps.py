"""Candidates as real environments, and COMMAND's verdict in them.

A candidate is GOOD's pins with some groups applied (a frozenset of group indices), or, for the
release walk, `(groups, Pin)`: those with one package pinned to another release. `Trials` is the
judge pax.bisect.search asks: each call builds the candidate's env from the wheel cache
(reusing the working venv, so only what differs is reinstalled; judging the same candidate again
reinstalls nothing), runs COMMAND under the rule, and records one Step with its votes, log file
and a line in steps.jsonl. Across Pythons there is one working venv per interpreter: a candidate
runs on BAD's where the interpreter's move (a group holding no package) is applied, else on
GOOD's.

COMMAND runs with the env's bin/ first on PATH, pax importable (PYTHONPATH), in the caller's
folder, with a timeout. A COMMAND that cannot be run at all on GOOD (not found, not executable,
or, through a shell, exit 126/127, as `git bisect run` checks on its first run), or that exits 2
there (bad input: a mistyped job directory for `compare`, pytest's collection error), is the
user's input, not a verdict: InputError. On another candidate it is a bad verdict with that
reason (the candidate lacks the tool, or a package broke the command's imports).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shlex
import subprocess
import time
from collections.abc import Hashable
from pathlib import Path

from pax.bisect.groups import Group
from pax.bisect.rule import BAD, GOOD, SKIP, SKIP_EXIT, Rule
from pax.environments.wheelcache import EnvBuilder
from pax.errors import USAGE, UsageError
from pax.lockfile import Pin

_SHELL_CANNOT = {126: "execute", 127: "find"}


class InputError(UsageError):
    """The tool's own inputs cannot make a bisect; the message is one line naming the fix."""


@dataclasses.dataclass
class Step:
    number: int
    label: str
    why: str  # what the search asked this judgment for
    python: str  # the Python version its env runs on ("3.11")
    applied: tuple[int, ...]
    pin: str = ""  # "name==version" set on top of the applied groups (release walk)
    verdict: str = SKIP
    votes: list[str] = dataclasses.field(default_factory=list)
    reason: str = ""  # why it was skipped, or what made it bad besides COMMAND's exit
    build: dict = dataclasses.field(default_factory=dict)  # kind, seconds, installed, removed
    runs: list[dict] = dataclasses.field(default_factory=list)
    log: str = ""
    output_tail: str = ""

    @property
    def mixed(self) -> bool:
        return GOOD in self.votes and BAD in self.votes

    @property
    def built(self) -> bool:
        """Whether this step built an env (a new venv, or one changed in place)."""
        return self.build.get("kind") in ("cold", "warm")

    def tally(self) -> str:
        """`3/5 passed` (runs that passed of runs made); '' when COMMAND did not run."""
        if not self.votes:
            return ""
        return f"{self.votes.count(GOOD)}/{len(self.votes)} passed"

    def as_json(self) -> dict:
        return {**dataclasses.asdict(self), "mixed": self.mixed, "tally": self.tally()}


def split_state(state: Hashable) -> tuple[frozenset, Pin | None]:
    if isinstance(state, tuple):
        return state[0], state[1]
    return state, None


class Trials:
    def __init__(
        self,
        good_pins: dict[str, Pin],
        groups: list[Group],
        command: list[str],
        builders: dict[str, EnvBuilder],
        out: Path,
        rule: Rule,
        timeout: float = 3600.0,
        cwd: Path | None = None,
        pythonpath: Path | None = None,
        log=print,
    ):
        self.good_pins, self.groups, self.command = good_pins, groups, command
        # one per Python version, GOOD's first
        self.builders, self.good_python = builders, next(iter(builders))
        self.out, self.rule, self.timeout = out, rule, timeout
        self.cwd = cwd or Path.cwd()
        self.pythonpath = str(pythonpath) if pythonpath else ""
        self.log = log
        self.steps: list[Step] = []
        self.history: dict[Hashable, list[Step]] = {}  # candidate -> its steps

    @property
    def latest(self) -> dict[Hashable, Step]:
        return {state: steps[-1] for state, steps in self.history.items()}

    # candidates ---------------------------------------------------------------------------
    def pins(self, state: Hashable) -> dict[str, Pin]:
        applied, override = split_state(state)
        pins = dict(self.good_pins)
        for i in applied:
            for change in self.groups[i].changes:
                if change.new is None:
                    pins.pop(change.name, None)
                else:
                    pins[change.name] = change.new
        if override is not None:
            pins[override.name] = override
        return pins

    def python(self, state: Hashable) -> str:
        """The Python version the candidate runs on: BAD's where the interpreter's move is
        applied."""
        applied, _ = split_state(state)
        moved = [self.groups[i].python[1] for i in applied if self.groups[i].python]
        return moved[0] if moved else self.good_python

    def label(self, state: Hashable) -> str:
        applied, override = split_state(state)
        n = len(self.groups)
        if override is not None:
            return f"{self.label(applied)} + {override.name} {override.version}"
        if not applied:
            return "GOOD"
        if len(applied) == n:
            return "BAD"
        if applied == frozenset(range(len(applied))):
            last = self.groups[len(applied) - 1].name
            return f"GOOD + groups 1..{len(applied)} of {n} (last: {last})"
        if len(applied) > n / 2:
            return "BAD without " + ", ".join(
                self.groups[i].name for i in range(n) if i not in applied
            )
        return "GOOD + " + ", ".join(self.groups[i].name for i in sorted(applied))

    # running COMMAND ----------------------------------------------------------------------
    def _command_env(self, python: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("PYTHONHOME", None)
        bindir = python.parent
        env["VIRTUAL_ENV"] = str(bindir.parent)
        env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath
        return env

    def _cannot_run(self, err: OSError) -> str:
        """Why COMMAND could not be started, and what to do."""
        name = self.command[0]
        if isinstance(err, FileNotFoundError):
            if os.sep in name:
                return f"COMMAND {name}: no such file (from {self.cwd})"
            return (
                f"COMMAND {name!r} not found: not on PATH, and no package of the env installs "
                "it; check its spelling, or add its package to the lock"
            )
        if isinstance(err, PermissionError) or err.errno == errno.ENOEXEC:
            return (
                f"COMMAND {name} is not executable ({err.strerror}): chmod +x it, or run it "
                f"through its interpreter (-- bash {name}, -- python {name})"
            )
        return f"COMMAND {name} cannot be started: {err}"

    def _run_once(self, python: Path, log_file) -> dict:
        cmd = self.command
        shell = len(cmd) == 1  # one word: a shell command line, as `git bisect run` takes
        started = time.monotonic()
        cannot = ""
        try:
            out = subprocess.run(
                cmd[0] if shell else cmd,
                shell=shell,
                cwd=self.cwd,
                env=self._command_env(python),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                timeout=self.timeout,
            )
            rc, text = out.returncode, out.stdout
        except subprocess.TimeoutExpired as err:
            rc = None
            text = err.stdout or ""
            text = text if isinstance(text, str) else text.decode("utf-8", "replace")
            text += f"\n[timed out after {self.timeout:g}s]\n"
        except OSError as err:  # not found, not executable: no exit status at all
            rc, cannot = None, self._cannot_run(err)
            text = cannot + "\n"
        seconds = time.monotonic() - started
        verdict = GOOD if rc == 0 else SKIP if rc == SKIP_EXIT else BAD
        log_file.write(f"$ {shlex.join(cmd)}  # exit {rc}, {seconds:.1f}s -> {verdict}\n{text}\n")
        return {
            "rc": rc,
            "seconds": round(seconds, 3),
            "verdict": verdict,
            "cannot_run": cannot,
            "tail": text[-2000:],
        }

    # the judge ----------------------------------------------------------------------------
    def __call__(self, state: Hashable, why: str) -> str:
        return self.judge(state, why).verdict

    def judge(self, state: Hashable, why: str) -> Step:
        applied, override = split_state(state)
        number = len(self.steps) + 1
        label = self.label(state)
        is_good = not applied and override is None
        endpoint = is_good or (override is None and len(applied) == len(self.groups))
        log_path = self.out / f"step-{number:02d}.log"
        step = Step(
            number,
            label,
            why,
            self.python(state),
            tuple(sorted(applied)),
            pin=f"{override.name}=={override.version}" if override else "",
            log=log_path.name,
        )
        cache = self.builders[step.python].cache
        if override is not None and cache.path(override) is None:
            cache.fetch([override])  # a release no lock pins: fetched when tried
        self.log(f"step {number}: {label} ({why})")
        try:
            self._build_and_vote(step, state, endpoint, is_good, log_path)
        except InputError as err:  # recorded, so the report shows where it stopped
            step.verdict, step.reason = "error", str(err)
            raise
        finally:
            self.steps.append(step)
            self.history.setdefault(state, []).append(step)
            with open(self.out / "steps.jsonl", "a") as f:
                f.write(json.dumps(step.as_json()) + "\n")
        self.log(
            f"step {number}: {step.verdict.upper()}"
            + (f" {step.tally()}" if step.votes else "")
            + (" MIXED" if step.mixed else "")
            + (f" ({step.reason})" if step.reason else "")
            + f"; env {step.build['kind']} {step.build['seconds']:.1f}s"
        )
        return step

    def _build_and_vote(self, step: Step, state, endpoint: bool, is_good: bool, log_path) -> None:
        applied, _ = split_state(state)
        build = self.builders[step.python].build(self.pins(state))
        step.build = {
            "kind": build.kind,
            "seconds": round(build.seconds, 2),
            "installed": build.installed,
            "removed": build.removed,
        }
        with open(log_path, "w") as log_file:
            log_file.write(f"step {step.number}: {step.label} ({step.why})\n")
            log_file.write(f"python: {step.python} ({self.builders[step.python].cache.python})\n")
            for i in sorted(applied):
                log_file.write(f"  applied: {self.groups[i].describe()}\n")
            log_file.write(
                f"env: {build.kind}, {build.seconds:.1f}s, {build.installed} installed, "
                f"{build.removed} removed\n"
            )
            if not build.ok:
                if endpoint:
                    raise InputError(f"{step.label} cannot be installed: {build.error}")
                step.reason = f"not installable: {build.error}"
            elif build.pip_check and not endpoint:
                step.reason = f"pip check failed: {build.pip_check}"
            else:
                if build.pip_check:
                    log_file.write(
                        f"warning: pip check fails in this endpoint: {build.pip_check}\n"
                    )
                self._vote(step, build.python, log_file, is_good)
            log_file.write(
                f"verdict: {step.verdict}"
                + (f" ({step.tally()})" if step.votes else "")
                + (f"; {step.reason}" if step.reason else "")
                + "\n"
            )

    def _vote(self, step: Step, python: Path, log_file, is_good: bool) -> None:
        def run_once() -> str:
            run = self._run_once(python, log_file)
            step.runs.append(run)
            if is_good and run["cannot_run"]:
                raise InputError(run["cannot_run"])
            said = [line.strip() for line in run["tail"].splitlines() if line.strip()][-1:]
            if is_good and run["rc"] == USAGE:
                # This project's commands exit 2 for bad input (a mistyped job directory),
                # which is the same at every step: the command is broken, not the env.
                raise InputError(
                    f"COMMAND exited {USAGE} (bad input) on GOOD"
                    + (f": {said[0]}" if said else "")
                    + "; fix the command, then bisect again"
                )
            if is_good and len(self.command) == 1 and run["rc"] in _SHELL_CANNOT:
                raise InputError(
                    f"COMMAND exited {run['rc']} on GOOD: the shell could not "
                    f"{_SHELL_CANNOT[run['rc']]} a command in it"
                    + (f" ({said[0]})" if said else "")
                    + "; check its spelling, and that the lock installs it"
                )
            return run["verdict"]

        step.verdict, step.votes = self.rule.judge(run_once)
        if step.verdict == SKIP:
            step.reason = f"COMMAND exited {SKIP_EXIT} (skip)"
        elif step.runs[-1]["cannot_run"]:
            step.reason = step.runs[-1]["cannot_run"]
        elif len(self.command) == 1 and step.runs[-1]["rc"] in _SHELL_CANNOT:
            rc = step.runs[-1]["rc"]  # a bad verdict still, but say what the shell said
            step.reason = f"COMMAND exited {rc}: the shell could not {_SHELL_CANNOT[rc]} a command"
        step.output_tail = step.runs[-1]["tail"]
