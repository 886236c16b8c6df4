"""Simulated bisects: the real search and rule over a COMMAND of known flakiness.

  python -m pax.bisect.simulate [--flake 0.3] [--false-pass 0] [--groups 24] [--partners 1]
                                [--seeds 1000] [--flaky | --retries N [--passes K]]

Each seed draws the culprit (one group, or `--partners` groups that break only together) among
`--groups`, then runs pax.bisect.search's Bisection with pax.bisect.rule's Rule, where a run of
COMMAND on a good env fails with probability `--flake` and one on a broken env passes with
probability `--false-pass`. No env is built: a bisect takes microseconds, so thousands of seeds
measure what a rule does to the answer:

  named        the culprit reported confirmed, and it is the right one
  false blame  a culprit reported confirmed, and it is the wrong one
  no answer    unconfirmed, partial or endpoints not reproduced (exit 1: nothing blamed)

and set it against what the rule promises: a single verdict on a good env is wrong with
probability e = Rule.good_called_bad(flake) (on a broken one, Rule.bad_called_good); a false
blame takes at least two wrong verdicts (the culprit is confirmed on two fresh judgments), so
with J verdicts in a bisect its probability is at most C(J, 2) * e**2.
"""

from __future__ import annotations

import dataclasses
import math
import random
import sys

from pax.bisect.rule import BAD, FLAKY, GOOD, Rule, percent
from pax.bisect.search import Bisection, Verdicts
from pax.errors import ExitingArgumentParser, UsageError, report


@dataclasses.dataclass(frozen=True)
class Scenario:
    groups: int = 24
    flake: float = 0.3  # P(a run fails on a good env)
    false_pass: float = 0.0  # P(a run passes on a broken env)
    partners: int = 1  # groups that must all be applied to break COMMAND


@dataclasses.dataclass
class Tally:
    seeds: int = 0
    named: int = 0
    false_blame: int = 0
    no_answer: int = 0
    judgments: list[int] = dataclasses.field(default_factory=list)
    runs: list[int] = dataclasses.field(default_factory=list)
    good_verdicts: int = 0  # verdicts on good envs ...
    good_called_bad: int = 0  # ... that came out bad
    broken_verdicts: int = 0
    broken_called_good: int = 0
    first_seeds: list[bool] = dataclasses.field(default_factory=list)  # named, seed by seed

    def promised_false_blame(self, rule: Rule, scenario: Scenario) -> float:
        e = max(rule.good_called_bad(scenario.flake), rule.bad_called_good(scenario.false_pass))
        return min(1.0, math.comb(max(self.judgments, default=0), 2) * e * e)


def one(seed: int, scenario: Scenario, rule: Rule, tally: Tally) -> bool:
    """One simulated bisect; True when it named the right culprit."""
    rng = random.Random(seed)
    truth = frozenset(rng.sample(range(scenario.groups), scenario.partners))
    runs = 0

    def judge(state, why):
        nonlocal runs
        broken = truth <= state

        def run_once():
            if broken:
                return GOOD if rng.random() < scenario.false_pass else BAD
            return BAD if rng.random() < scenario.flake else GOOD

        verdict, votes = rule.judge(run_once)
        runs += len(votes)
        if broken:
            tally.broken_verdicts += 1
            tally.broken_called_good += verdict == GOOD
        else:
            tally.good_verdicts += 1
            tally.good_called_bad += verdict == BAD
        return verdict

    verdicts = Verdicts(judge, log=lambda msg: None)
    outcome = Bisection(scenario.groups, verdicts, log=lambda msg: None).run()
    named = outcome.confirmed and frozenset(outcome.culprit) == truth
    tally.seeds += 1
    tally.named += named
    tally.false_blame += outcome.confirmed and not named
    tally.no_answer += not outcome.confirmed
    tally.judgments.append(sum(len(h) for h in verdicts.history.values()))
    tally.runs.append(runs)
    return named


def measure(scenario: Scenario, rule: Rule, seeds: range) -> Tally:
    tally = Tally()
    for seed in seeds:
        tally.first_seeds.append(one(seed, scenario, rule, tally))
    return tally


def summary(scenario: Scenario, rule: Rule, tally: Tally) -> list[str]:
    n = tally.seeds
    first = tally.first_seeds[:20]
    return [
        f"scenario: {scenario.groups} groups, culprit of {scenario.partners} group(s); a run "
        f"fails on a good env {percent(scenario.flake)}, passes on a broken one "
        f"{percent(scenario.false_pass)}",
        f"rule: {rule.describe()}",
        f"  promises: a good env called bad {percent(rule.good_called_bad(scenario.flake))}, "
        f"a broken env called good {percent(rule.bad_called_good(scenario.false_pass))}",
        f"  measured: good env called bad {tally.good_called_bad} of {tally.good_verdicts} "
        f"verdicts ({percent(tally.good_called_bad / max(tally.good_verdicts, 1))}), broken "
        f"env called good {tally.broken_called_good} of {tally.broken_verdicts}",
        f"{n} seeds: named {tally.named} ({percent(tally.named / n)}), false blame "
        f"{tally.false_blame} ({percent(tally.false_blame / n)}; promised at most "
        f"{percent(tally.promised_false_blame(rule, scenario))}), no answer {tally.no_answer}",
        f"  first {len(first)} seeds: named {sum(first)}",
        f"  cost per bisect: {sum(tally.judgments) / n:.1f} verdicts (at most "
        f"{max(tally.judgments)}), {sum(tally.runs) / n:.1f} runs of COMMAND",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = ExitingArgumentParser(
        prog="python -m pax.bisect.simulate",
        description="Measure a verdict rule on simulated bisects with a flaky COMMAND.",
    )
    parser.add_argument("--flake", type=float, default=0.3, help="P(run fails on a good env)")
    parser.add_argument("--false-pass", type=float, default=0.0, help="P(run passes on a bad env)")
    parser.add_argument("--groups", type=int, default=24)
    parser.add_argument("--partners", type=int, default=1, help="groups that break together")
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--flaky", action="store_true", help=f"the preset: {FLAKY.describe()}")
    parser.add_argument("--retries", type=int, default=0, metavar="N")
    parser.add_argument("--passes", type=int, default=1, metavar="K")
    args = parser.parse_args(argv)
    try:
        rule = FLAKY if args.flaky else Rule(args.retries + 1, args.passes)
        scenario = Scenario(args.groups, args.flake, args.false_pass, args.partners)
        if not (0 <= args.flake < 1 and 0 <= args.false_pass < 1):
            raise ValueError("--flake and --false-pass are probabilities below 1")
        if not 1 <= args.partners <= args.groups or args.seeds < 1:
            raise ValueError("need 1 <= --partners <= --groups and --seeds >= 1")
    except ValueError as err:
        return report("pax bisect simulate", UsageError(str(err)))
    for line in summary(scenario, rule, measure(scenario, rule, range(args.seeds))):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
