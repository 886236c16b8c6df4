"""How runs of COMMAND make one verdict on one environment, and how often that verdict is wrong.

A run votes good (exit 0), bad (any other exit, a timeout too) or skip (exit 125, as in `git
bisect run`: COMMAND says it cannot judge this env). A `Rule` runs COMMAND up to `runs` times
and stops as soon as the verdict is certain:

  good  once `passes` runs passed                        (default 1: any pass)
  bad   once `runs - passes + 1` runs failed             (passes can no longer be reached)
  skip  at the first run that exits 125                  (no vote can overturn it)

"Any pass" fits the common flaky check: a good env sometimes fails for reasons of its own
(a race, a timeout, a port in use), a broken env does not pass by accident. If a good env fails
a run with probability p, the rule calls it bad with probability P(fewer than `passes` of `runs`
pass) = p**runs for any-pass; a broken env that passes a run with probability q is called good
with probability P(at least `passes` pass). `--passes K` buys the second guarantee with more
runs. Both are binomial tails over independent runs; sequential stopping does not change them,
as the verdict is the one all `runs` runs would have given.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

GOOD, BAD, SKIP = "good", "bad", "skip"
SKIP_EXIT = 125


def binomial_below(k: int, n: int, p: float) -> float:
    """P(X < k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(max(k, 0)))


@dataclasses.dataclass(frozen=True)
class Rule:
    runs: int = 1  # at most this many runs per verdict
    passes: int = 1  # good once this many have passed

    def __post_init__(self):
        if self.runs < 1 or not 1 <= self.passes <= self.runs:
            raise ValueError(f"need 1 <= passes ({self.passes}) <= runs ({self.runs})")

    def verdict(self, votes: Sequence[str]) -> str | None:
        """The verdict once `votes` settle it; None while another run could change it."""
        if SKIP in votes:
            return SKIP
        if votes.count(GOOD) >= self.passes:
            return GOOD
        if votes.count(BAD) > self.runs - self.passes:
            return BAD
        return None

    def judge(self, run_once: Callable[[], str]) -> tuple[str, list[str]]:
        """Run until the verdict is certain: (verdict, the votes it took)."""
        votes: list[str] = []
        while (verdict := self.verdict(votes)) is None:
            votes.append(run_once())
        return verdict, votes

    def good_called_bad(self, flake: float) -> float:
        """P(bad verdict) for a good env whose runs fail with probability `flake`."""
        return binomial_below(self.passes, self.runs, 1 - flake)

    def bad_called_good(self, false_pass: float) -> float:
        """P(good verdict) for a broken env whose runs pass with probability `false_pass`."""
        return 1 - binomial_below(self.passes, self.runs, false_pass)

    def describe(self) -> str:
        if self.runs == 1:
            return "one run per verdict: exit 0 good, 125 skip, anything else bad"
        if self.passes == 1:
            return f"good as soon as one run passes; bad when all {self.runs} runs fail"
        return (
            f"good as soon as {self.passes} of up to {self.runs} runs pass; bad once "
            f"{self.runs - self.passes + 1} fail"
        )

    def flags(self) -> str:
        """The command-line options that give this rule."""
        if self == FLAKY:
            return "--flaky"
        return " ".join(
            [f"--retries {self.runs - 1}"] * (self.runs > 1)
            + [f"--passes {self.passes}"] * (self.passes > 1)
        )

    def as_json(self) -> dict:
        return {"runs": self.runs, "passes": self.passes, "describe": self.describe()}


FLAKY = Rule(runs=5, passes=1)  # --flaky: a good env failing 30% of runs is called bad 0.24%


def percent(p: float) -> str:
    """0.00243 -> '0.243%', 1.0 -> '100%' (three significant digits)."""
    return f"{p * 100:.3g}%"


@dataclasses.dataclass(frozen=True)
class FlakeEstimate:
    """What the runs on envs judged good say about how often COMMAND fails by itself."""

    failed: int  # runs that failed, in envs whose verdict was good
    runs: int  # all runs in those envs

    @property
    def rate(self) -> float:
        # The votes of good envs end at their deciding pass, so they are a negative-binomial
        # sample; failed/runs is still the maximum-likelihood flake rate (the likelihood is
        # p**failed * (1-p)**passed whatever the stopping rule).
        return self.failed / self.runs if self.runs else 0.0


def estimate_flake(judgments: Sequence[tuple[str, Sequence[str]]]) -> FlakeEstimate:
    """From (verdict, votes) pairs: the failed share of runs in envs judged good."""
    good = [votes for verdict, votes in judgments if verdict == GOOD]
    return FlakeEstimate(sum(v.count(BAD) for v in good), sum(len(v) for v in good))
