"""The Pythons a bisect runs on: GOOD's and BAD's, their interpreters, and their wheels.

An end's Python is `--good-python`/`--bad-python` where given; else a release's (the one its
locks are compiled with, release.toml's first `python`); else what the lock's pip-compile header
says (`... with Python 3.11`); else the other end's, and the running interpreter's when neither
names one. Each is found by pax.interpreters before any wheel is fetched; a missing one is one
line (exit 2).

When the two differ, the interpreter's move is one more change (pax.bisect.groups.python_group)
and each interpreter gets every pin's wheel it can have: an end's own wheels must be had, but a
wheel only the other end's Python lacks (jax 0.12 on 3.11) just leaves the candidates that need
it there uninstallable, to be skipped.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from pax import interpreters
from pax.bisect.steps import InputError
from pax.environments.wheelcache import EnvBuilder, Problem, WheelCache
from pax.lockfile import Lock
from pax.releases import catalog as dist_release

_VERSION_RE = re.compile(r"^3\.\d+$")


def version(text: str) -> str:
    """An argparse type: a Python version as X.Y."""
    if not _VERSION_RE.match(text):
        raise ValueError(text)
    return text


@dataclasses.dataclass(frozen=True)
class Pythons:
    good: str  # "3.11"
    bad: str
    interpreters: dict[str, str]  # version -> interpreter, GOOD's first

    @property
    def moved(self) -> bool:
        return self.good != self.bad

    def describe(self) -> str:
        """`3.11 (/path/python3.11) -> 3.13 (/path/python3.13)`, or the one when they agree."""
        named = [f"{v} ({self.interpreters[v]})" for v in self.interpreters]
        return " -> ".join(named)

    def as_json(self) -> dict:
        return {"good": self.good, "bad": self.bad, "interpreters": self.interpreters}


def _named(lock: Lock, given: str | None, flag: str) -> str | None:
    """The Python an end names: the flag's, its release's (of several, the running one, else the
    first this machine has), its lock header's; None if none."""
    release = dist_release.resolve(lock.release).pythons if lock.release else ()
    if given and release and given not in release:
        raise InputError(
            f"{flag} {given}: release {lock.release} installs on Python {' or '.join(release)}"
        )
    if given or not release:
        return given or lock.python
    if interpreters.running() in release:
        return interpreters.running()
    return next((v for v in release if interpreters.find(v)), release[0])


def resolve(good: Lock, bad: Lock, args) -> Pythons:
    """GOOD's and BAD's Pythons (args: the parsed --good/--bad and --good-python/--bad-python)
    and an interpreter for each; InputError naming a Python that is not found."""
    named_good = _named(good, args.good_python, "--good-python")
    named_bad = _named(bad, args.bad_python, "--bad-python")
    good_version = named_good or named_bad or interpreters.running()
    bad_version = named_bad or named_good or interpreters.running()
    found = {}
    for wanted, spec in ((good_version, f"--good {args.good}"), (bad_version, f"--bad {args.bad}")):
        if wanted not in found:
            try:
                found[wanted] = interpreters.require([wanted], spec)[1]
            except interpreters.MissingPython as err:
                raise InputError(str(err)) from None
    return Pythons(good_version, bad_version, found)


def builders(
    pythons: Pythons, cache: dict, env: Path, installer: str, log
) -> dict[str, EnvBuilder]:
    """A wheel cache's view and a working venv for each Python, GOOD's first: `env` itself when
    there is one Python, `env-pythonX.Y` beside it for each of two. `cache`: WheelCache's
    arguments but the interpreter's. RuntimeError (from the installer) when none can be run."""
    out = {}
    for wanted, python in pythons.interpreters.items():
        path = env.with_name(f"{env.name}-python{wanted}") if pythons.moved else env
        out[wanted] = EnvBuilder(path, WheelCache(**cache, python=python, log=log), installer, log)
    return out


def fetch(builders: dict[str, EnvBuilder], pythons: Pythons, good: Lock, bad: Lock, log):
    """Every pin's wheel for each Python; returns the problems that stop the bisect: an end's
    own wheel that cannot be had on its Python, or one the index serves wrong."""
    pins = sorted({*good.pins.values(), *bad.pins.values()}, key=lambda p: p.name)
    ends = ((pythons.good, good), (pythons.bad, bad))
    stop: list[Problem] = []
    # BAD's Python first: a wheel of BAD's that GOOD's Python cannot take is then told by its
    # metadata, without a pip call that fails
    for wanted, builder in reversed(builders.items()):
        own = {
            f"{p.name}=={p.version}" for v, lock in ends if v == wanted for p in lock.pins.values()
        }
        others = []
        for problem in builder.cache.fetch(pins):
            # a hash the index does not serve, or an index that does not answer, is wrong
            # whichever Python asks
            if problem.pin in own or problem.kind != "no wheel":
                stop.append(problem)
            else:
                others.append(problem.pin)
        if others:
            log(
                f"{len(others)} wheel(s) not to be had for Python {wanted} ({', '.join(others)}): "
                f"candidates on Python {wanted} that need them are skipped"
            )
    return stop
