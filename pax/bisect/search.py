"""The search, as an algorithm over verdicts: which candidate to judge next and what the
verdicts prove. Building a candidate env and running COMMAND in it is pax.bisect.steps';
pax.bisect.simulate drives the same code with a simulated COMMAND of known flakiness.

A candidate is GOOD plus a set of groups (a frozenset of group indices; the groups are ordered,
dependencies first) or, for the release walk, any other hashable key the judge understands.

1. Endpoints: GOOD must pass and BAD must fail; a verdict against that expectation is judged
   again, and a third judgment decides when the two differ.
2. Binary search over the prefixes GOOD + groups[:k] for the first bad one; a candidate that
   cannot be installed (skip) is stepped around, as `git bisect skip` does.
3. Confirmation, each claim on two agreeing fresh judgments (a third when they differ), as
   JAX-Toolbox's triage re-runs its first-bad and last-good configurations
   (jax_toolbox_triage/logic.py, version_search: "a final line of defence against flakiness"):
   - the culprit alone on GOOD fails (else: a partner is needed, or the search was misled by a
     wrong bad verdict: the first bad prefix is judged again, and the search goes on from there
     when it passes);
   - BAD without the culprit passes (if it fails too, another change also breaks COMMAND:
     reported as such, not as a confirmed culprit).
4. A culprit that needs partners (an interaction) is cut down to the members each of which it
   cannot do without: removing any one makes it pass (needed to break) or uninstallable
   (needed to install).

A wrong bad verdict on a good env (the usual flake) can mislead step 2, but not 3: blaming an
innocent group needs two wrong verdicts on GOOD + that group, and BAD without it still holds
the real culprit, so it keeps failing.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Hashable, Sequence

from pax.bisect.rule import BAD, GOOD, SKIP
from pax.environments import index
from pax.lockfile import Pin, version_key

ROUNDS = 3  # searches resumed after a first-bad verdict was overturned, before giving up


def search(
    states: Sequence[Hashable],
    verdict: Callable[[Hashable], str],
    lo: int = 0,
    hi: int | None = None,
) -> tuple[int, int, list[int]]:
    """First bad state between states[lo] (not bad) and states[hi] (bad), skips stepped around.

    Returns (lo, hi, skipped): states[lo] is the last state known not bad, states[hi] the first
    known bad, and every state strictly between them was skipped (hi - lo == 1 when the search
    isolated one step).
    """
    hi = len(states) - 1 if hi is None else hi
    skipped: set[int] = set()
    while True:
        open_ = [i for i in range(lo + 1, hi) if i not in skipped]
        if not open_:
            return lo, hi, sorted(i for i in skipped if lo < i < hi)
        mid = (lo + hi) / 2
        pick = min(open_, key=lambda i: (abs(i - mid), i))
        answer = verdict(states[pick])
        if answer == BAD:
            hi = pick
        elif answer == GOOD:
            lo = pick
        else:
            skipped.add(pick)


class Verdicts:
    """Every candidate's verdicts so far. `judge(state, why)` is one fresh judgment (one step)."""

    def __init__(self, judge: Callable[[Hashable, str], str], log=print):
        self.judge, self.log = judge, log
        self.history: dict[Hashable, list[str]] = {}
        self.known: dict[Hashable, str] = {}

    def fresh(self, state: Hashable, why: str) -> str:
        answer = self.judge(state, why)
        self.history.setdefault(state, []).append(answer)
        self.known[state] = answer
        return answer

    def get(self, state: Hashable, why: str) -> str:
        """The verdict the search goes by: the known one, else a first judgment."""
        return self.known[state] if state in self.known else self.fresh(state, why)

    def confirm(self, state: Hashable, why: str) -> str:
        """Two agreeing judgments (an earlier one counts); a third decides when they differ."""
        seen = list(self.history.get(state, [])[-1:])
        while len(seen) < 2 or (len(seen) == 2 and seen[0] != seen[1]):
            seen.append(self.fresh(state, why))
            if seen[-1] == SKIP:
                break
        answer = SKIP if SKIP in seen else max((GOOD, BAD), key=seen.count)
        self.known[state] = answer
        return answer

    def expect(self, state: Hashable, want: str, why: str) -> str:
        """The first verdict if it is `want`; else confirmed (a wrong endpoint ends the run)."""
        answer = self.get(state, why)
        if answer == want or answer == SKIP:
            return answer
        return self.confirm(state, why + " (again)")

    def contested(self) -> list[Hashable]:
        """States whose judgments disagreed: the clearest sign of a flaky COMMAND."""
        return [s for s, h in self.history.items() if GOOD in h and BAD in h]


@dataclasses.dataclass
class Outcome:
    status: str  # found | partial | unconfirmed | not reproduced
    detail: str = ""
    culprit: tuple[int, ...] = ()  # group indices
    roles: dict[int, str] = dataclasses.field(default_factory=dict)  # breaks | installs
    alone: str = ""  # confirmed verdict of GOOD + culprit
    without: str = ""  # confirmed verdict of BAD without the culprit
    ambiguous: bool = False  # skipped candidates kept the culprit's groups together
    last_good: Hashable | None = None
    first_bad: Hashable | None = None
    rounds: int = 0

    @property
    def interaction(self) -> bool:
        return sum(role == "breaks" for role in self.roles.values()) > 1

    @property
    def confirmed(self) -> bool:
        return self.status == "found"


def prefix(k: int) -> frozenset:
    return frozenset(range(k))


class Bisection:
    """The search over `n` ordered groups; `verdicts` judges the candidates."""

    def __init__(self, n: int, verdicts: Verdicts, log=print, rounds: int = ROUNDS):
        self.n, self.verdicts, self.log, self.rounds = n, verdicts, log, rounds

    def run(self) -> Outcome:
        v, n = self.verdicts, self.n
        every = prefix(n)
        good = v.expect(frozenset(), GOOD, "GOOD")
        if good != GOOD:
            return Outcome("not reproduced", f"COMMAND does not pass on GOOD ({good})")
        bad = v.expect(every, BAD, "BAD")
        if bad != BAD:
            return Outcome("not reproduced", f"COMMAND does not fail on BAD ({bad})")
        prefixes = [prefix(k) for k in range(n + 1)]
        for round_ in range(1, self.rounds + 1):
            hi = min(k for k in range(n + 1) if v.known.get(prefixes[k]) == BAD)
            lo = max(k for k in range(hi) if v.known.get(prefixes[k]) == GOOD)
            lo, hi, skipped = search(prefixes, lambda s: v.get(s, "search"), lo, hi)
            if skipped:
                self.log(
                    f"groups {lo + 1}..{hi} stay together: the candidates between them were skipped"
                )
            culprit = frozenset(range(lo, hi))
            alone = v.confirm(culprit, "confirm: culprit alone on GOOD")
            if alone != BAD:
                # A partner needed, or a wrong bad verdict misled the search: judge the first
                # bad prefix again (alone already did when the culprit is that prefix).
                again = alone if lo == 0 else v.confirm(prefixes[hi], "recheck first bad")
                if again == GOOD:
                    self.log("the first bad candidate passes when judged again: search on")
                    continue
                found = self._interaction(culprit, lo, hi)
                if found is None:
                    return Outcome(
                        "unconfirmed",
                        "no set of groups before the first bad candidate breaks COMMAND "
                        "reproducibly with it",
                        tuple(sorted(culprit)),
                        first_bad=prefixes[hi],
                        last_good=prefixes[lo],
                        rounds=round_,
                    )
                culprit = found
            roles = self._minimize(culprit)
            culprit = frozenset(roles)
            return self._finish(culprit, roles, bool(skipped), prefixes[lo], prefixes[hi], round_)
        return Outcome(
            "unconfirmed",
            f"the first bad candidate was overturned {self.rounds} times: COMMAND is too "
            "flaky for this rule (raise --retries)",
            rounds=self.rounds,
        )

    def _interaction(self, culprit: frozenset, lo: int, hi: int) -> frozenset | None:
        """The culprit with the partners it needs, confirmed; None when no set holds up.

        When the set found does not fail again, a wrong bad verdict misled the partner search
        (the set's own, or one the search went by: those are judged again), and the search is
        redone on the corrected verdicts, until nothing more is overturned."""
        v = self.verdicts
        for _ in range(self.rounds):
            members = self._partners(culprit, lo, hi)
            if v.confirm(members, "confirm: culprit set on GOOD") == BAD:
                return members
            # what the partner search went by: candidates holding the culprit, inside the
            # first bad prefix, with a single bad verdict
            suspects = [
                s
                for s, seen in v.history.items()
                if seen == [BAD] and isinstance(s, frozenset) and culprit <= s < prefix(hi)
            ]
            overturned = BAD in v.history[members]  # the search stopped on a flake
            flipped = [s for s in suspects if v.confirm(s, "recheck partner search") != BAD]
            if not overturned and not flipped:
                return None
            self.log("a candidate the partner search went by passes when judged again: redo it")
        return None

    def _partners(self, culprit: frozenset, lo: int, hi: int) -> frozenset:
        """The groups before the culprit it needs to break COMMAND: a search per partner."""
        v = self.verdicts
        members, pool = set(culprit), list(range(lo))
        self.log("the culprit alone on GOOD does not fail: searching the groups before it")
        while pool:
            fixed = frozenset(members)
            # states[0]: the members alone (not bad); states[-1]: with the whole pool (bad)
            states = [fixed | frozenset(pool[:j]) for j in range(len(pool) + 1)]
            plo, phi, _ = search(states, lambda s: v.get(s, "partner search"))
            members |= set(pool[plo:phi])
            pool = pool[:plo]
            if v.get(frozenset(members), "partner search") == BAD:
                return frozenset(members)
        return frozenset(members) if v.known.get(frozenset(members)) == BAD else prefix(hi)

    def _minimize(self, culprit: frozenset) -> dict[int, str]:
        """Each member's role: needed to break, or needed to install; the rest dropped."""
        if len(culprit) == 1:
            return {next(iter(culprit)): "breaks"}
        v, members, roles = self.verdicts, set(culprit), {}
        for group in sorted(culprit):
            rest = frozenset(members - {group})
            answer = v.confirm(rest, "confirm: culprit set without one member")
            if answer == BAD:  # not needed: the others break COMMAND without it
                members.discard(group)
            else:
                roles[group] = "breaks" if answer == GOOD else "installs"
        return {g: roles[g] for g in sorted(members)}

    def _finish(self, culprit, roles, ambiguous, last_good, first_bad, round_) -> Outcome:
        v = self.verdicts
        without = v.confirm(prefix(self.n) - culprit, "confirm: BAD without the culprit")
        outcome = Outcome(
            "found",
            culprit=tuple(sorted(culprit)),
            roles=roles,
            alone=v.known[culprit],
            without=without,
            ambiguous=ambiguous,
            last_good=last_good,
            first_bad=first_bad,
            rounds=round_,
        )
        if without == BAD:
            outcome.status = "partial"
            outcome.detail = (
                "BAD without it still fails: another change breaks COMMAND too (bisect again "
                "with BAD minus this culprit)"
            )
        elif without == SKIP:
            outcome.detail = "BAD without it cannot be installed, so it was not checked"
        return outcome


def walk(verdicts: Verdicts, states: Sequence[Hashable], log=print, rounds: int = ROUNDS):
    """The first bad state of an ordered walk whose ends are known (states[0] good, states[-1]
    bad): searched, then its first bad and last good states confirmed, the search resumed when
    either is overturned. Returns (lo, hi, skipped, confirmed)."""
    lo, hi, skipped = 0, len(states) - 1, []
    for _ in range(rounds):
        hi = min(i for i, s in enumerate(states) if verdicts.known.get(s) == BAD)
        lo = max(i for i in range(hi) if verdicts.known.get(states[i]) == GOOD)
        lo, hi, skipped = search(states, lambda s: verdicts.get(s, "release search"), lo, hi)
        if verdicts.confirm(states[hi], "confirm: first bad release") != BAD:
            log("the first bad release passes when judged again: search on")
            continue
        if verdicts.confirm(states[lo], "confirm: last good release") != GOOD:
            log("the last good release fails when judged again: search on")
            continue
        return lo, hi, skipped, True
    return lo, hi, skipped, False


_PRE_RELEASE_RE = re.compile(r"\d[._-]?(a|b|c|rc|alpha|beta|pre|preview|dev)", re.I)


def releases_between(old: str, new: str, listed) -> list[str]:
    """The versions in `listed` strictly between old and new, ordered from old to new;
    pre-releases only when an endpoint is one."""
    lo, hi = sorted((version_key(old), version_key(new)))
    pre_ok = any(_PRE_RELEASE_RE.search(v) for v in (old, new))
    return sorted(
        (
            v
            for v in listed
            if lo < version_key(v) < hi and (pre_ok or not _PRE_RELEASE_RE.search(v))
        ),
        key=version_key,
        reverse=version_key(old) > version_key(new),
    )


def walk_versions(outcome: Outcome, groups, verdicts: Verdicts, published, log=print) -> dict:
    """Within a single culprit package, the first release between GOOD's and BAD's that breaks.

    `published(name) -> {version: hashes}` lists the index's releases. Each candidate is GOOD
    with the package pinned to one release, `(frozenset(), Pin)`; the walk's ends are GOOD and
    the culprit alone on GOOD, both confirmed already.
    """
    if not outcome.confirmed or outcome.alone != BAD or len(outcome.culprit) != 1:
        return {"status": "skipped: --versions needs one confirmed culprit that breaks alone"}
    group = groups[outcome.culprit[0]]
    if group.python:
        return {"status": "skipped: the culprit is the interpreter, not a package"}
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
    between = releases_between(old, new, listed)
    log(
        f"--versions: {len(between)} release(s) of {change.name} between {old} and {new} on "
        f"the index: {', '.join(between) or 'none'}"
    )
    states = [
        frozenset(),
        *((frozenset(), Pin(change.name, v, listed[v])) for v in between),
        frozenset(outcome.culprit),
    ]
    lo, hi, unresolved, confirmed = walk(verdicts, states, log)
    versions = [old, *between, new]
    status = (
        "found" if confirmed and not unresolved else "ambiguous" if confirmed else "unconfirmed"
    )
    return {
        "status": status,
        "package": change.name,
        "good": old,
        "bad": new,
        "between": between,
        "last_good": versions[lo],
        "first_bad": versions[hi],
        "unresolved": [versions[k] for k in unresolved],
        "states": (states[lo], states[hi]),
        "bound": math.ceil(math.log2(len(between) + 1)),
    }
