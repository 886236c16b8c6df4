"""Bisect a breakage over the package changes between two lockfiles.

  python -m pax.dist.bisect --good A --bad B [--platform cpu] [options] -- COMMAND...
  (nox: ./noxw -s bisect -- --good 1.3.0 --bad 1.4.0 -- python -c "import jax")

A and B: a release, a lockfile path or GITREV:path (see pax.dist.diff), or `image`: inside a
pax image, the lock it was built from ($PAX_LOCKFILE). The search:

1. diff the locks into changes and group what must move together: jax, jaxlib, the jax
   plugins and libtpu; each `nvidia-*-cuNN` family; every `--group a,b` the user gives.
   Groups are ordered dependencies first (from the wheels' metadata), then by name.
2. confirm the endpoints: COMMAND passes in an env built exactly from GOOD, fails in BAD.
3. binary-search the prefixes GOOD + groups[:k]; a candidate that cannot be installed or
   fails `pip check` is skipped (like `git bisect skip`) and a neighbour is tried instead.
4. check the culprit alone on top of GOOD; if it passes alone, search the groups before it
   for the smallest set that breaks together with it.
5. with --versions, when one package breaks alone: list the releases the index published
   between its GOOD and BAD versions (pax.dist.index) and bisect them, each on top of GOOD,
   to name the first bad release (pre-releases only when an endpoint is one).

Each env is built from one shared, hash-verified wheel cache with `--no-deps` installs, and
reused between steps (only what differs is reinstalled). COMMAND runs in it (its bin/ first
on PATH, pax importable: the checkout, or in an image the installed pax alone, on
PYTHONPATH), with a timeout; exit 0 is good, 125 is skip (as in `git
bisect run`), anything else (a timeout too) is bad. `--retries N` runs each step up to N+1
times; the verdict is the strict majority (no majority: skip).

Output folder: report.txt, report.json, steps.jsonl, and one log per step. Exit status:
0 culprit found; 1 endpoints do not reproduce or nothing could be isolated; 2 usage error.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import functools
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from pax.dist import diff as dist_diff
from pax.dist import index
from pax.dist import release as dist_release
from pax.dist.lockfile import Pin
from pax.dist.wheelcache import EnvBuilder, WheelCache

GOOD, BAD, SKIP = "good", "bad", "skip"
SKIP_EXIT = 125
_JAX_RE = re.compile(r"^(jax|jaxlib|libtpu|libtpu-nightly|jax-(cuda|rocm)\d*(-\w+)*|jax-tpu.*)$")
_NVIDIA_RE = re.compile(r"^nvidia-.+-(cu\d+)$")
_PRE_RELEASE_RE = re.compile(r"\d[._-]?(a|b|c|rc|alpha|beta|pre|preview|dev)", re.I)


class BisectError(RuntimeError):
    """Bad input or a run that cannot go on; the message says what to do."""


# Groups ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Group:
    name: str
    changes: tuple[dist_diff.Change, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.changes)

    def describe(self) -> str:
        if len(self.changes) == 1:
            return self.changes[0].describe()
        return f"{self.name}: " + ", ".join(c.describe() for c in self.changes)

    def as_json(self) -> dict:
        return {"name": self.name, "changes": [c.as_json() for c in self.changes]}


def auto_group(name: str) -> str | None:
    if _JAX_RE.match(name):
        return "jax"
    match = _NVIDIA_RE.match(name)
    if match:
        return f"nvidia-*-{match.group(1)}"
    return None


def make_groups(changes: list[dist_diff.Change], user_groups: list[list[str]] = (),
                log=print) -> list[Group]:
    """One group per change, except the couplings (automatic and user-given), merged."""
    changed = {c.name: c for c in changes}
    parent = {name: name for name in changed}
    label: dict[str, str] = {}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a, b):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[rb] = ra
            names = sorted({label[r] for r in (ra, rb) if r in label})
            if names:
                label[ra] = " + ".join(names)

    first_of: dict[str, str] = {}
    for name in sorted(changed):
        key = auto_group(name)
        if key is None:
            continue
        if key in first_of:
            union(first_of[key], name)
        else:
            first_of[key] = name
            label[name] = key
    for members in user_groups:
        canon = [dist_diff.lockfile.canonicalize(m) for m in members if m.strip()]
        unknown = [m for m in canon if m not in changed]
        if unknown:
            log(f"--group: {', '.join(unknown)} did not change between the locks; ignored")
        kept = [m for m in canon if m in changed]
        for other in kept[1:]:
            union(kept[0], other)
        if len(kept) > 1:
            root = find(kept[0])
            label.setdefault(root, "+".join(kept))
    members: dict[str, list[dist_diff.Change]] = {}
    for name in sorted(changed):
        members.setdefault(find(name), []).append(changed[name])
    groups = []
    for root, items in members.items():
        name = label.get(root, root) if len(items) > 1 else items[0].name
        groups.append(Group(name, tuple(items)))
    return sorted(groups, key=lambda g: g.name)


def order_groups(groups: list[Group], requires) -> list[Group]:
    """Dependencies first, so a prefix of the groups tends to be installable; else by name.

    `requires(pin) -> set of names` reads a wheel's dependencies. A group goes after the groups
    its new versions depend on; a removal goes after the groups whose old versions needed it.
    """
    where = {name: i for i, g in enumerate(groups) for name in g.names}
    after: dict[int, set[int]] = {i: set() for i in range(len(groups))}  # i after these
    for i, group in enumerate(groups):
        for change in group.changes:
            if change.new is not None:
                for dep in requires(change.new):
                    j = where.get(dep)
                    if j is not None and j != i:
                        after[i].add(j)
    for j, group in enumerate(groups):
        for change in group.changes:
            if change.new is None:  # removed: after the groups whose old versions needed it
                for i, other in enumerate(groups):
                    if i != j and any(c.old is not None and change.name in requires(c.old)
                                      for c in other.changes):
                        after[j].add(i)
    ordered, placed = [], set()
    while len(ordered) < len(groups):
        ready = [i for i in range(len(groups)) if i not in placed and after[i] <= placed]
        if not ready:  # a cycle: take the first by name, the rest follow
            ready = [i for i in range(len(groups)) if i not in placed]
        pick = min(ready, key=lambda i: groups[i].name)
        placed.add(pick)
        ordered.append(groups[pick])
    return ordered


# Steps -------------------------------------------------------------------------------------

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
    def __init__(self, good: dist_diff.Lock, bad: dist_diff.Lock, groups: list[Group],
                 command: list[str], builder: EnvBuilder, out: Path, retries: int = 0,
                 timeout: float = 3600.0, cwd: Path | None = None,
                 pythonpath: Path | None = None, log=print):
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
            out = subprocess.run(cmd[0] if shell else cmd, shell=shell, cwd=self.cwd,
                                 env=self._command_env(python), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, errors="replace",
                                 timeout=self.timeout)
            rc, text = out.returncode, out.stdout
        except subprocess.TimeoutExpired as err:
            rc = None
            text = (err.stdout or "") if isinstance(err.stdout, str) else (
                (err.stdout or b"").decode("utf-8", "replace"))
            text += f"\n[timed out after {self.timeout:g}s]\n"
        seconds = time.monotonic() - started
        verdict = GOOD if rc == 0 else SKIP if rc == SKIP_EXIT else BAD
        log_file.write(f"$ {shlex.join(cmd)}  # exit {rc}, {seconds:.1f}s -> {verdict}\n{text}\n")
        return {"rc": rc, "seconds": round(seconds, 3), "verdict": verdict, "tail": text[-2000:]}

    def evaluate(self, applied: frozenset, endpoint: bool = False,
                 override: Pin | None = None) -> Step:
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
        step = Step(number, label, tuple(sorted(applied)), SKIP,
                    pin=f"{override.name}=={override.version}" if override else "",
                    build_kind=build.kind, build_seconds=round(build.seconds, 2),
                    log=log_path.name)
        self.builds.append({"step": number, "kind": build.kind, "seconds": round(build.seconds, 2),
                            "installed": build.installed, "removed": build.removed})
        with open(log_path, "w") as log_file:
            log_file.write(f"step {number}: {label}\n")
            for i in sorted(applied):
                log_file.write(f"  applied: {self.groups[i].describe()}\n")
            log_file.write(f"env build: {build.kind}, {build.seconds:.1f}s, "
                           f"{build.installed} installed, {build.removed} removed\n")
            if not build.ok:
                step.reason = f"not installable: {build.error}"
            elif build.pip_check and not endpoint:
                step.reason = f"pip check failed: {build.pip_check}"
            else:
                if build.pip_check:
                    log_file.write(f"warning: pip check fails in this endpoint: "
                                   f"{build.pip_check}\n")
                total = self.retries + 1
                while majority([r["verdict"] for r in step.runs], total) is None \
                        and len(step.runs) < total:
                    step.runs.append(self._run_once(build.python, log_file))
                votes = [r["verdict"] for r in step.runs]
                step.verdict = majority(votes, total) or SKIP
                if step.verdict == SKIP:
                    step.reason = ("no majority: " + ", ".join(votes) if SKIP not in votes
                                   else f"COMMAND exited {SKIP_EXIT} (skip)")
                elif len(set(votes)) > 1:
                    step.reason = "flaky: " + ", ".join(votes)
                step.output_tail = step.runs[-1]["tail"]
            if step.reason:
                log_file.write(f"verdict: {step.verdict} ({step.reason})\n")
            else:
                log_file.write(f"verdict: {step.verdict}\n")
        ran = ", ".join(f"exit {r['rc']} in {r['seconds']:.1f}s" for r in step.runs)
        self.log(f"step {number}: {step.verdict.upper()}"
                 + (f" ({step.reason})" if step.reason else "")
                 + f"; env {build.kind} {build.seconds:.1f}s" + (f"; {ran}" if ran else ""))
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
        result = {"groups": [g.as_json() for g in self.groups], "skipped": [],
                  "culprit": None, "alone": None, "status": ""}
        if n == 0:
            result["status"] = "no changes: the two locks pin the same packages"
            return result
        bound = math.ceil(math.log2(n)) + 3 if n > 1 else 3
        self.log(f"{n} group(s) of changes; single-culprit bound: ceil(log2 {n}) + 3 = {bound} "
                 f"env builds")
        for g_i, group in enumerate(self.groups, 1):
            self.log(f"  {g_i:>3}. {group.describe()}")
        good = self.evaluate(frozenset(), endpoint=True)
        if good.verdict != GOOD:
            result["status"] = (f"endpoints do not reproduce: COMMAND does not pass on GOOD "
                                f"({self.good.label}): {good.verdict}"
                                + (f", {good.reason}" if good.reason else ""))
            return result
        bad = self.evaluate(everything, endpoint=True)
        if bad.verdict != BAD:
            result["status"] = (f"endpoints do not reproduce: COMMAND does not fail on BAD "
                                f"({self.bad.label}): {bad.verdict}"
                                + (f", {bad.reason}" if bad.reason else ""))
            return result
        prefixes = [frozenset(range(k)) for k in range(n + 1)]
        lo, hi, skipped = search(prefixes, self.verdict)
        culprit = list(range(lo, hi))
        result["last_good"] = self.memo[prefixes[lo], None].number
        result["first_bad"] = self.memo[prefixes[hi], None].number
        if skipped:
            self.log(f"could not separate groups {lo + 1}..{hi}: the states between them "
                     "were skipped; treating them as one culprit")
        # Alone on top of GOOD.
        alone = frozenset(culprit)
        verdict = self.verdict(alone)
        result["alone"] = verdict
        culprit_set = set(culprit)
        if verdict != BAD:
            self.log(f"{' + '.join(self.groups[i].name for i in culprit)} alone on GOOD: "
                     f"{verdict}; searching the groups before it for a partner")
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
        result["culprit_confirmed"] = self.memo.get((frozenset(culprit_set), None),
                                                    Step(0, "", (), SKIP)).verdict == BAD
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
            return {"status": f"skipped: the culprit is a group of {len(group.changes)} packages "
                              "that move together; --versions walks one package"}
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
        between = sorted((v for v in listed
                          if dist_diff.compare_versions(old, v) == direction
                          and dist_diff.compare_versions(v, new) == direction
                          and (pre_ok or not _PRE_RELEASE_RE.search(v))),
                         key=functools.cmp_to_key(dist_diff.compare_versions),
                         reverse=direction > 0)
        # State 0 is GOOD (the old release), the last is the culprit alone (the new one).
        overrides = [None, *(Pin(change.name, v, listed[v]) for v in between), None]
        alone = frozenset(self.culprit)
        self.log(f"--versions: {len(between)} release(s) of {change.name} between {old} and "
                 f"{new} on the index: {', '.join(between) or 'none'}")

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
            "package": change.name, "good": old, "bad": new, "between": between,
            "last_good": versions[lo], "first_bad": versions[hi],
            "last_good_step": self.memo[state(lo)].number,
            "first_bad_step": self.memo[state(hi)].number,
            "unresolved": [versions[k] for k in unresolved],
            "skipped": {s.pin.split("==", 1)[1]: s.reason for s in walked if s.verdict == SKIP},
            "env_builds": len(walked), "bound": math.ceil(math.log2(len(between) + 1)),
        }


# Report -----------------------------------------------------------------------------------

def _tail_lines(text: str, n: int = 8) -> list[str]:
    return [line for line in (text or "").rstrip().splitlines()][-n:]


def _versions_lines(walk: dict | None) -> list[str]:
    if not walk:
        return []
    if "package" not in walk:
        return [f"  --versions {walk['status']}"]
    name, between = walk["package"], walk["between"]
    lines = [f"  releases of {name} between {walk['good']} and {walk['bad']} on the index: "
             f"{', '.join(between) or 'none'} ({walk['env_builds']} env builds, bound "
             f"ceil(log2 {len(between) + 1}) = {walk['bound']})"]
    if walk["status"] == "found":
        lines.append(f"  first bad release: {name} {walk['first_bad']} "
                     f"(last good: {walk['last_good']}; step {walk['first_bad_step']} vs "
                     f"{walk['last_good_step']})")
    else:
        lines.append(f"  first bad release: {name} {walk['first_bad']} or one of "
                     f"{', '.join(walk['unresolved'])} before it (skipped; last good: "
                     f"{walk['last_good']})")
    return lines


def format_report(good: dist_diff.Lock, bad: dist_diff.Lock, bis: Bisector, result: dict,
                  command: list[str], seconds: float) -> str:
    steps = bis.steps
    lines = ["", "=" * 72, "pax bisect report", "=" * 72,
             f"GOOD     {good.label}", f"BAD      {bad.label}",
             f"COMMAND  {shlex.join(command)}",
             f"changes  {sum(len(g.changes) for g in bis.groups)} package(s) in "
             f"{len(bis.groups)} group(s)"]
    if result["status"] != "found":
        lines.append(f"RESULT   {result['status']}")
    else:
        culprits = [Group(c["name"], tuple(ch for g in bis.groups if g.name == c["name"]
                                           for ch in g.changes)) for c in result["culprit"]]
        if result.get("interaction"):
            lines.append("RESULT   an interaction: these changes break COMMAND only together")
        elif result.get("ambiguous"):
            lines.append("RESULT   culprit among these groups (the states between them were "
                         "skipped, so they could not be told apart)")
        else:
            lines.append("RESULT   culprit found")
        for group in culprits:
            for change in group.changes:
                prefix = f"[{group.name}] " if len(group.changes) > 1 else ""
                lines.append(f"  {prefix}{change.describe()}"
                             + ("   MAJOR" if change.major else ""))
        alone = result.get("alone")
        if result.get("interaction"):
            lines.append(f"  the last change alone on GOOD: {alone}; together: "
                         + ("bad (confirmed)" if result.get("culprit_confirmed") else "unconfirmed"))
        else:
            lines.append(f"  alone on top of GOOD: {alone}"
                         + ("" if alone == BAD else "  (does not reproduce alone)"))
        lines.extend(_versions_lines(result.get("versions")))
    builds = [b for b in bis.builds if b["kind"] != "none"]
    cold = [b["seconds"] for b in builds if b["kind"] == "cold"]
    warm = [b["seconds"] for b in builds if b["kind"] == "warm"]
    n = len(bis.groups)
    bound = result.get("bound") or (math.ceil(math.log2(n)) + 3 if n > 1 else 3)
    walked = (result.get("versions") or {}).get("env_builds", 0)
    lines.append(f"steps    {len(steps)} env builds"
                 + (f": {len(steps) - walked} for the groups" if walked else "")
                 + f" (single-culprit bound: ceil(log2 {n}) + 3 = {bound})"
                 + (f", {walked} for the releases" if walked else "")
                 + (f"; cold {sum(cold) / len(cold):.1f}s" if cold else "")
                 + (f", warm {sum(warm) / len(warm):.1f}s on average" if warm else "")
                 + f"; {seconds:.0f}s in all")
    for step in steps:
        tag = step.verdict.upper() + (f" ({step.reason})" if step.reason else "")
        lines.append(f"  {step.number:>2}. {tag:<8} {step.label}")
    skipped = [s for s in steps if s.verdict == SKIP]
    if skipped:
        lines.append("skipped")
        for step in skipped:
            lines.append(f"  step {step.number}: {step.reason}")
    for key, title in (("last_good", "last good"), ("first_bad", "first bad")):
        number = result.get(key)
        if number:
            step = steps[number - 1]
            lines.append(f"COMMAND output, {title} env (step {number}, {step.label}):")
            lines.extend(f"  | {line}" for line in _tail_lines(step.output_tail) or ["(none)"])
    lines.append(f"logs     {bis.out}")
    return "\n".join(lines)


# CLI --------------------------------------------------------------------------------------

def _default_platform() -> str:
    platform = os.environ.get("PAX_PLATFORM", "")
    return platform if platform in dist_release.PLATFORMS else "cpu"


def checkout() -> Path | None:
    """The source checkout pax runs from; None when pax is installed (as in an image)."""
    root = dist_release.REPO_ROOT
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
        link.symlink_to(Path(__file__).resolve().parents[1], target_is_directory=True)
    return folder


def parse_args(argv: list[str]) -> argparse.Namespace:
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
    else:
        command = []
    parser = argparse.ArgumentParser(
        prog="pax.dist.bisect",
        usage="%(prog)s --good A --bad B [--platform cpu] [options] -- COMMAND...",
        description="Find the package change between two lockfiles that breaks COMMAND.")
    parser.add_argument("--good", required=True,
                        help="release, lockfile path, GITREV:path, or `image` ($PAX_LOCKFILE)")
    parser.add_argument("--bad", required=True,
                        help="release, lockfile path, GITREV:path, or `image` ($PAX_LOCKFILE)")
    parser.add_argument("--platform", default=_default_platform(), choices=dist_release.PLATFORMS,
                        help="which lock of a release (default: $PAX_PLATFORM, else cpu)")
    parser.add_argument("--group", action="append", default=[], metavar="A,B",
                        help="packages that must move together (repeatable)")
    parser.add_argument("--retries", type=int, default=0, metavar="N",
                        help="run each step up to N+1 times; the verdict is the majority")
    parser.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                        help="per run of COMMAND; a timeout counts as bad (default 3600)")
    parser.add_argument("--out", type=Path, help="output folder (default runs/bisect/<time>, "
                        "under the checkout, else under the current folder)")
    parser.add_argument("--cache", type=Path, help="wheel cache (default .venv/bisect/wheels, "
                        "likewise)")
    parser.add_argument("--env", type=Path, help="the working venv (default OUT/env)")
    parser.add_argument("--keep-env", action="store_true", help="keep the venv at the end")
    parser.add_argument("--installer", choices=("pip", "uv"), default="pip")
    parser.add_argument("--index-url", help="index to fetch wheels from (default: pip's)")
    parser.add_argument("--find-links", action="append", default=[], metavar="DIR",
                        help="fetch wheels from this folder (with --no-index: only from it)")
    parser.add_argument("--no-index", action="store_true")
    parser.add_argument("--versions", action="store_true",
                        help="then, within a single culprit package, bisect the releases the "
                             "index published between its GOOD and BAD versions")
    args = parser.parse_args(argv)
    if not command:
        parser.error("name the COMMAND after `--`, e.g. -- python -c 'import jax'")
    if args.retries < 0:
        parser.error("--retries must be 0 or more")
    args.command = command
    return args


def main(argv: list[str] | None = None, log=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    log = log or (lambda msg: print(f"bisect: {msg}", flush=True))
    try:
        args = parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        good = dist_diff.load(args.good, args.platform)
        bad = dist_diff.load(args.bad, args.platform)
    except dist_diff.LockSpecError as err:
        print(f"bisect: {err}", file=sys.stderr)
        return 2
    root = checkout() or Path.cwd()
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = (args.out or root / "runs" / "bisect" / stamp).resolve()
    if out.exists() and any(out.iterdir()):
        print(f"bisect: output folder {out} is not empty; name another with --out",
              file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    find_links = [d if "://" in d else str(Path(d).resolve()) for d in args.find_links]
    index_args = (["--index-url", args.index_url] if args.index_url else []) + \
        [a for d in find_links for a in ("--find-links", d)] + \
        (["--no-index"] if args.no_index else [])
    started = time.monotonic()
    changes = dist_diff.diff(good.pins, bad.pins)
    cache = WheelCache((args.cache or root / ".venv" / "bisect" / "wheels").resolve(),
                       index_args, log=log)
    try:
        builder = EnvBuilder((args.env or out / "env").resolve(), cache, args.installer, log=log)
        cache.fetch(sorted({*good.pins.values(), *bad.pins.values()}, key=lambda p: p.name))
    except RuntimeError as err:  # no installer to be had
        print(f"bisect: {err}", file=sys.stderr)
        out.rmdir()  # still empty: nothing half-written
        return 2
    groups = order_groups(make_groups(changes, [g.split(",") for g in args.group], log=log),
                          cache.requires)
    pythonpath = out / ".pythonpath"
    bis = Bisector(good, bad, groups, args.command, builder, out, retries=args.retries,
                   timeout=args.timeout, pythonpath=import_root(pythonpath), log=log)
    try:
        result = bis.run()
        if args.versions:
            result["versions"] = bis.walk_versions(result, functools.partial(
                index.published, index_url=args.index_url, find_links=find_links,
                no_index=args.no_index))
    finally:
        shutil.rmtree(pythonpath, ignore_errors=True)
        if not args.keep_env:
            builder.discard()
    seconds = time.monotonic() - started
    text = format_report(good, bad, bis, result, args.command, seconds)
    report = {**result, "good": good.label, "bad": bad.label, "command": args.command,
              "steps": [s.as_json() for s in bis.steps], "env_builds": len(bis.steps),
              "builds": bis.builds, "missing_wheels": cache.missing,
              "seconds": round(seconds, 1)}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.txt").write_text(text + "\n")
    print(text, flush=True)
    return 0 if result["status"] == "found" else 1


if __name__ == "__main__":
    sys.exit(main())
