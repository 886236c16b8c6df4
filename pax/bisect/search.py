"""The search: candidate environments GOOD + a prefix of the groups, built from one wheel cache,
COMMAND's verdict on each, the binary search over prefixes, the culprit's confirmation and the
walk over its intermediate releases."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

from pax.bisect.groups import Group
from pax.environments import index
from pax.environments.wheelcache import EnvBuilder
from pax.releases import catalog as dist_release
from pax.releases import diff as dist_diff
from pax.releases.lockfile import Pin

GOOD, BAD, SKIP = "good", "bad", "skip"
SKIP_EXIT = 125
_PRE_RELEASE_RE = re.compile(r"\d[._-]?(a|b|c|rc|alpha|beta|pre|preview|dev)", re.I)


class BisectError(RuntimeError):
    """Bad input or a run that cannot go on; the message says what to do."""


@dataclasses.dataclass
class Step:
    number: int
    label: str
    applied: tuple[int, ...]
    verdict: str
    pin: str = ""  # "name==version" set on top of the applied groups (--versions)
    reason: str = ""
    build_kind: str = ""
    build_seconds: float = 0.0
    runs: list[dict] = dataclasses.field(default_factory=list)
    log: str = ""
    output_tail: str = ""

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


def majority(votes: list[str], total: int) -> str | None:
    """The verdict with more than half of `total` runs, once it is settled; else None."""
    for verdict in (GOOD, BAD, SKIP):
        if votes.count(verdict) * 2 > total:
            return verdict
    return None


def search(states: list[frozenset], evaluate) -> tuple[int, int, list[int]]:
    """First bad state, skipping uninstallable ones: states[0] not bad, states[-1] bad.

    Returns (lo, hi, skipped): states[lo] is the last state known not bad, states[hi] the
    first known bad, and every state strictly between them was skipped (hi - lo == 1 when
    the search isolated one step).
    """
    lo, hi, skipped = 0, len(states) - 1, set()
    while True:
        open_ = [i for i in range(lo + 1, hi) if i not in skipped]
        if not open_:
            return lo, hi, sorted(i for i in skipped if lo < i < hi)
        mid = (lo + hi) / 2
        pick = min(open_, key=lambda i: (abs(i - mid), i))
        verdict = evaluate(states[pick])
        if verdict == BAD:
            hi = pick
        elif verdict == GOOD:
            lo = pick
        else:
            skipped.add(pick)


class Bisector:
    def __init__(
        self,
        good: dist_diff.Lock,
        bad: dist_diff.Lock,
        groups: list[Group],
        command: list[str],
        builder: EnvBuilder,
        out: Path,
        retries: int = 0,
        timeout: float = 3600.0,
        cwd: Path | None = None,
        pythonpath: Path | None = None,
        log=print,
    ):
        self.good, self.bad, self.groups = good, bad, groups
        self.command, self.builder, self.out = command, builder, out
        self.retries, self.timeout, self.log = retries, timeout, log
        self.cwd = cwd or Path.cwd()
        self.pythonpath = str(pythonpath or dist_release.REPO_ROOT)  # COMMAND imports pax
        self.steps: list[Step] = []
        self.memo: dict[tuple[frozenset, Pin | None], Step] = {}
        self.builds: list[dict] = []
        self.culprit: list[int] = []  # group indices, once the search found them

    # environments --------------------------------------------------------------------------
    def pins(self, applied: frozenset, override: Pin | None = None) -> dict[str, Pin]:
        pins = dict(self.good.pins)
        for i in applied:
            for change in self.groups[i].changes:
                if change.new is None:
                    pins.pop(change.name, None)
                else:
                    pins[change.name] = change.new
        if override is not None:
            pins[override.name] = override
        return pins

    def label(self, applied: frozenset, override: Pin | None = None) -> str:
        n = len(self.groups)
        if override is not None:
            return f"{self.label(applied)} + {override.name} {override.version}"
        if not applied:
            return "GOOD"
        if len(applied) == n:
            return "BAD"
        if applied == frozenset(range(len(applied))):
            return f"GOOD + groups 1..{len(applied)} of {n} (last: {self.groups[len(applied) - 1].name})"
        return "GOOD + " + ", ".join(self.groups[i].name for i in sorted(applied))

    def _command_env(self, python: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("PYTHONHOME", None)
        bindir = python.parent
        env["VIRTUAL_ENV"] = str(bindir.parent)
        env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = self.pythonpath
        return env

    def _run_once(self, python: Path, log_file) -> dict:
        cmd = self.command
        shell = len(cmd) == 1
        started = time.monotonic()
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
            text = (
                (err.stdout or "")
                if isinstance(err.stdout, str)
                else ((err.stdout or b"").decode("utf-8", "replace"))
            )
            text += f"\n[timed out after {self.timeout:g}s]\n"
        seconds = time.monotonic() - started
        verdict = GOOD if rc == 0 else SKIP if rc == SKIP_EXIT else BAD
        log_file.write(f"$ {shlex.join(cmd)}  # exit {rc}, {seconds:.1f}s -> {verdict}\n{text}\n")
        return {"rc": rc, "seconds": round(seconds, 3), "verdict": verdict, "tail": text[-2000:]}

    def evaluate(
        self, applied: frozenset, endpoint: bool = False, override: Pin | None = None
    ) -> Step:
        if (applied, override) in self.memo:
            return self.memo[applied, override]
        number = len(self.steps) + 1
        label = self.label(applied, override)
        log_path = self.out / f"step-{number:02d}.log"
        if override is not None:
            self.builder.cache.fetch([override])  # a release no lock pins: fetched when tried
        self.log(f"step {number}: {label}: building env")
        pins = self.pins(applied, override)
        build = self.builder.build(pins)
        step = Step(
            number,
            label,
            tuple(sorted(applied)),
            SKIP,
            pin=f"{override.name}=={override.version}" if override else "",
            build_kind=build.kind,
            build_seconds=round(build.seconds, 2),
            log=log_path.name,
        )
        self.builds.append(
            {
                "step": number,
                "kind": build.kind,
                "seconds": round(build.seconds, 2),
                "installed": build.installed,
                "removed": build.removed,
            }
        )
        with open(log_path, "w") as log_file:
            log_file.write(f"step {number}: {label}\n")
            for i in sorted(applied):
                log_file.write(f"  applied: {self.groups[i].describe()}\n")
            log_file.write(
                f"env build: {build.kind}, {build.seconds:.1f}s, "
                f"{build.installed} installed, {build.removed} removed\n"
            )
            if not build.ok:
                step.reason = f"not installable: {build.error}"
            elif build.pip_check and not endpoint:
                step.reason = f"pip check failed: {build.pip_check}"
            else:
                if build.pip_check:
                    log_file.write(
                        f"warning: pip check fails in this endpoint: {build.pip_check}\n"
                    )
                total = self.retries + 1
                while (
                    majority([r["verdict"] for r in step.runs], total) is None
                    and len(step.runs) < total
                ):
                    step.runs.append(self._run_once(build.python, log_file))
                votes = [r["verdict"] for r in step.runs]
                step.verdict = majority(votes, total) or SKIP
                if step.verdict == SKIP:
                    step.reason = (
                        "no majority: " + ", ".join(votes)
                        if SKIP not in votes
                        else f"COMMAND exited {SKIP_EXIT} (skip)"
                    )
                elif len(set(votes)) > 1:
                    step.reason = "flaky: " + ", ".join(votes)
                step.output_tail = step.runs[-1]["tail"]
            if step.reason:
                log_file.write(f"verdict: {step.verdict} ({step.reason})\n")
            else:
                log_file.write(f"verdict: {step.verdict}\n")
        ran = ", ".join(f"exit {r['rc']} in {r['seconds']:.1f}s" for r in step.runs)
        self.log(
            f"step {number}: {step.verdict.upper()}"
            + (f" ({step.reason})" if step.reason else "")
            + f"; env {build.kind} {build.seconds:.1f}s"
            + (f"; {ran}" if ran else "")
        )
        self.steps.append(step)
        self.memo[applied, override] = step
        with open(self.out / "steps.jsonl", "a") as f:
            f.write(json.dumps(step.as_json()) + "\n")
        return step

    def verdict(self, applied: frozenset) -> str:
        return self.evaluate(applied).verdict

    # the search ----------------------------------------------------------------------------
    def run(self) -> dict:
        n = len(self.groups)
        everything = frozenset(range(n))
        result = {
            "groups": [g.as_json() for g in self.groups],
            "skipped": [],
            "culprit": None,
            "alone": None,
            "status": "",
        }
        if n == 0:
            result["status"] = "no changes: the two locks pin the same packages"
            return result
        bound = math.ceil(math.log2(n)) + 3 if n > 1 else 3
        self.log(
            f"{n} group(s) of changes; single-culprit bound: ceil(log2 {n}) + 3 = {bound} "
            f"env builds"
        )
        for g_i, group in enumerate(self.groups, 1):
            self.log(f"  {g_i:>3}. {group.describe()}")
        good = self.evaluate(frozenset(), endpoint=True)
        if good.verdict != GOOD:
            result["status"] = (
                f"endpoints do not reproduce: COMMAND does not pass on GOOD "
                f"({self.good.label}): {good.verdict}" + (f", {good.reason}" if good.reason else "")
            )
            return result
        bad = self.evaluate(everything, endpoint=True)
        if bad.verdict != BAD:
            result["status"] = (
                f"endpoints do not reproduce: COMMAND does not fail on BAD "
                f"({self.bad.label}): {bad.verdict}" + (f", {bad.reason}" if bad.reason else "")
            )
            return result
        prefixes = [frozenset(range(k)) for k in range(n + 1)]
        lo, hi, skipped = search(prefixes, self.verdict)
        culprit = list(range(lo, hi))
        result["last_good"] = self.memo[prefixes[lo], None].number
        result["first_bad"] = self.memo[prefixes[hi], None].number
        if skipped:
            self.log(
                f"could not separate groups {lo + 1}..{hi}: the states between them "
                "were skipped; treating them as one culprit"
            )
        # Alone on top of GOOD.
        alone = frozenset(culprit)
        verdict = self.verdict(alone)
        result["alone"] = verdict
        culprit_set = set(culprit)
        if verdict != BAD:
            self.log(
                f"{' + '.join(self.groups[i].name for i in culprit)} alone on GOOD: "
                f"{verdict}; searching the groups before it for a partner"
            )
            pool = list(range(lo))
            while pool:
                fixed = frozenset(culprit_set)
                states = [fixed | frozenset(pool[:j]) for j in range(len(pool) + 1)]
                plo, phi, _ = search(states, self.verdict)
                culprit_set |= set(pool[plo:phi])
                pool = pool[:plo]
                if self.verdict(frozenset(culprit_set)) == BAD:
                    break
            else:
                if self.verdict(frozenset(culprit_set)) != BAD:
                    culprit_set = set(range(hi))  # only the whole prefix reproduces
        self.culprit = sorted(culprit_set)
        result["culprit"] = [self.groups[i].as_json() for i in self.culprit]
        result["culprit_confirmed"] = (
            self.memo.get((frozenset(culprit_set), None), Step(0, "", (), SKIP)).verdict == BAD
        )
        result["interaction"] = len(culprit_set) > len(culprit)
        result["ambiguous"] = len(culprit) > 1 and not result["interaction"] and bool(skipped)
        result["status"] = "found"
        result["bound"] = bound
        return result

    def walk_versions(self, result: dict, published) -> dict:
        """Within a single culprit package, the first release between GOOD's and BAD's that breaks.

        `published(name) -> {version: hashes}` lists the index's releases. Each candidate is
        GOOD with the package pinned to one release; a release with no wheel for this platform,
        or one that fails `pip check`, is skipped.
        """
        group = self.groups[self.culprit[0]] if len(self.culprit) == 1 else None
        if result.get("status") != "found" or result.get("alone") != BAD or group is None:
            return {"status": "skipped: --versions needs one culprit that breaks alone on GOOD"}
        if len(group.changes) != 1:
            return {
                "status": f"skipped: the culprit is a group of {len(group.changes)} packages "
                "that move together; --versions walks one package"
            }
        change = group.changes[0]
        if change.old is None or change.new is None:
            return {"status": f"skipped: {change.describe()} has no versions in between"}
        old, new = change.old.version, change.new.version
        try:
            listed = published(change.name)
        except index.IndexUnreadable as err:
            return {"status": f"skipped: cannot list the releases of {change.name}: {err}"}
        direction = dist_diff.compare_versions(old, new)  # -1: an upgrade
        pre_ok = any(_PRE_RELEASE_RE.search(v) for v in (old, new))
        between = sorted(
            (
                v
                for v in listed
                if dist_diff.compare_versions(old, v) == direction
                and dist_diff.compare_versions(v, new) == direction
                and (pre_ok or not _PRE_RELEASE_RE.search(v))
            ),
            key=functools.cmp_to_key(dist_diff.compare_versions),
            reverse=direction > 0,
        )
        # State 0 is GOOD (the old release), the last is the culprit alone (the new one).
        overrides = [None, *(Pin(change.name, v, listed[v]) for v in between), None]
        alone = frozenset(self.culprit)
        self.log(
            f"--versions: {len(between)} release(s) of {change.name} between {old} and "
            f"{new} on the index: {', '.join(between) or 'none'}"
        )

        def state(k: int) -> tuple[frozenset, Pin | None]:
            return (alone if k == len(overrides) - 1 else frozenset()), overrides[k]

        def verdict(k: int) -> str:
            applied, override = state(k)
            return self.evaluate(applied, override=override).verdict

        before = len(self.steps)
        lo, hi, unresolved = search(list(range(len(overrides))), verdict)
        versions = [old, *between, new]
        walked = self.steps[before:]
        return {
            "status": "ambiguous" if unresolved else "found",
            "package": change.name,
            "good": old,
            "bad": new,
            "between": between,
            "last_good": versions[lo],
            "first_bad": versions[hi],
            "last_good_step": self.memo[state(lo)].number,
            "first_bad_step": self.memo[state(hi)].number,
            "unresolved": [versions[k] for k in unresolved],
            "skipped": {s.pin.split("==", 1)[1]: s.reason for s in walked if s.verdict == SKIP},
            "env_builds": len(walked),
            "bound": math.ceil(math.log2(len(between) + 1)),
        }


# Report -----------------------------------------------------------------------------------
