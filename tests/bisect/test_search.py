"""The search and the verdict rule without environments: candidates judged by a function.

The rule's error rates are checked against scipy's binomial distribution; the search's answers
against scripted verdicts (deterministic, and one flake in a chosen place) and against many
seeds of pax.bisect.simulate's flaky COMMAND.
"""

import math

import pytest

from pax.bisect import rule as rules
from pax.bisect import search, simulate
from pax.bisect.rule import BAD, FLAKY, GOOD, SKIP, Rule
from pax.bisect.search import Bisection, Verdicts


@pytest.mark.parametrize("bad_from", [1, 5, 17, 31, 32])
def test_search_takes_log2_steps(bad_from):
    states = list(range(33))
    asked = []

    def verdict(state):
        asked.append(state)
        return BAD if state >= bad_from else GOOD

    lo, hi, skipped = search.search(states, verdict)
    assert (lo, hi, skipped) == (bad_from - 1, bad_from, [])
    assert len(asked) <= math.ceil(math.log2(32))


def test_search_works_around_skips():
    lo, hi, skipped = search.search(
        list(range(9)), lambda s: SKIP if s in (4, 5) else BAD if s >= 5 else GOOD
    )
    assert (lo, hi, skipped) == (3, 6, [4, 5])  # 5 is bad but skipped: 4..5 unresolved


# The rule --------------------------------------------------------------------------------


def scripted(votes):
    """A COMMAND whose runs vote as listed; counts how many ran."""
    it = iter(votes)
    ran = []

    def run_once():
        ran.append(next(it))
        return ran[-1]

    return run_once, ran


@pytest.mark.parametrize(
    "runs, passes, votes, verdict, used",
    [
        (1, 1, [BAD], BAD, 1),
        (5, 1, [BAD, BAD, GOOD, BAD, BAD], GOOD, 3),  # stops at the first pass
        (5, 1, [BAD] * 5, BAD, 5),
        (5, 3, [GOOD, BAD, BAD, BAD, GOOD], BAD, 4),  # 3 passes out of reach after 3 fails
        (5, 3, [GOOD, BAD, GOOD, GOOD, BAD], GOOD, 4),
        (5, 1, [BAD, 125], SKIP, 2),  # COMMAND says it cannot judge: no run overturns that
    ],
)
def test_rule_stops_once_the_verdict_is_certain(runs, passes, votes, verdict, used):
    run_once, ran = scripted([SKIP if v == 125 else v for v in votes])
    assert Rule(runs, passes).judge(run_once) == (verdict, ran)
    assert len(ran) == used


@pytest.mark.parametrize("runs, passes", [(1, 1), (5, 1), (5, 3), (9, 5), (4, 4)])
@pytest.mark.parametrize("p", [0.05, 0.3, 0.5])
def test_rule_error_rates_are_binomial_tails(runs, passes, p):
    from scipy.stats import binom  # here, not at collection: scipy.stats takes 1.6 s to import

    rule = Rule(runs, passes)
    # a good env is called bad when fewer than `passes` runs pass, each passing with 1 - p
    assert rule.good_called_bad(p) == pytest.approx(binom.cdf(passes - 1, runs, 1 - p))
    # a broken env is called good when at least `passes` runs pass, each with p
    assert rule.bad_called_good(p) == pytest.approx(binom.sf(passes - 1, runs, p))


def test_flaky_preset_and_bad_rules():
    assert (FLAKY.runs, FLAKY.passes, FLAKY.flags()) == (5, 1, "--flaky")
    assert (Rule().flags(), Rule(3, 2).flags()) == ("", "--retries 2 --passes 2")
    assert FLAKY.good_called_bad(0.3) == pytest.approx(0.3**5)  # 0.24%
    assert rules.percent(0.3**5) == "0.243%"
    # a strict majority of 5 (`--retries 4 --passes 3`) calls a 30%-flaky good env bad 16% of
    # the time
    assert Rule(5, 3).good_called_bad(0.3) == pytest.approx(0.163, abs=5e-4)
    with pytest.raises(ValueError):
        Rule(3, 4)


def test_flake_estimate_counts_runs_of_envs_judged_good():
    estimate = rules.estimate_flake(
        [(GOOD, [BAD, GOOD]), (GOOD, [GOOD]), (BAD, [BAD, BAD]), (GOOD, [BAD, BAD, GOOD])]
    )
    assert (estimate.failed, estimate.runs, estimate.rate) == (3, 6, 0.5)


# The search over groups, with scripted verdicts --------------------------------------------


def judge_by(truth, uninstallable=(), flakes=()):
    """Verdicts from `truth(state)`; states in `uninstallable` skip; `flakes` lists states
    whose first judgment comes out bad although the env is good."""
    asked = []
    pending = list(flakes)

    def judge(state, why):
        asked.append((state, why))
        if any(state == u for u in uninstallable):
            return SKIP
        if state in pending:
            pending.remove(state)
            return BAD
        return BAD if truth(state) else GOOD

    return judge, asked


def bisect(n, truth, **kw):
    judge, asked = judge_by(truth, **kw)
    verdicts = Verdicts(judge, log=lambda m: None)
    return Bisection(n, verdicts, log=lambda m: None).run(), verdicts, asked


def test_single_culprit_confirmed_both_ways():
    outcome, verdicts, asked = bisect(24, lambda s: 13 in s)
    assert (outcome.status, outcome.culprit, outcome.roles) == ("found", (13,), {13: "breaks"})
    assert (outcome.alone, outcome.without) == (BAD, GOOD)
    every = frozenset(range(24))
    assert verdicts.history[frozenset({13})] == [BAD, BAD]  # two fresh verdicts each way
    assert verdicts.history[every - {13}] == [GOOD, GOOD]
    # judged: the 2 endpoints, ceil(log2 24) = 5 searches, 2 + 2 confirmations
    assert len(asked) <= 2 + math.ceil(math.log2(24)) + 4


def test_interaction_keeps_only_members_it_needs():
    outcome, _, _ = bisect(10, lambda s: {2, 6} <= s)
    assert outcome.status == "found" and outcome.interaction
    assert outcome.culprit == (2, 6) and outcome.roles == {2: "breaks", 6: "breaks"}


def test_a_dependency_needed_to_install_is_no_partner():
    # group 5 breaks COMMAND but cannot be installed without group 1 (its new dependency)
    def uninstallable(state):
        return 5 in state and 1 not in state

    judge, _ = judge_by(lambda s: 5 in s)

    def judge_with_deps(state, why):
        return SKIP if uninstallable(state) else judge(state, why)

    outcome = Bisection(8, Verdicts(judge_with_deps, log=lambda m: None), log=lambda m: None).run()
    assert outcome.status == "found" and not outcome.interaction
    assert outcome.roles == {1: "installs", 5: "breaks"}


def test_two_independent_culprits_are_reported_as_partial():
    outcome, _, _ = bisect(16, lambda s: 4 in s or 11 in s)
    assert outcome.status == "partial" and outcome.culprit == (4,)
    assert outcome.without == BAD and "another change breaks COMMAND too" in outcome.detail


def test_a_flake_that_misleads_the_search_is_overturned():
    # Group 13 breaks; the search's first probe, GOOD + groups 1..12, flakes (bad). The search
    # then ends at group 11 (index), which passes alone on GOOD: the first bad prefix is judged
    # again, passes (twice: it was contested), and the search goes on to the real culprit.
    flake = frozenset(range(12))
    outcome, verdicts, _ = bisect(24, lambda s: 13 in s, flakes=[flake])
    assert (outcome.status, outcome.culprit, outcome.rounds) == ("found", (13,), 2)
    assert flake in verdicts.contested()


def test_a_flake_that_misleads_the_partner_search_is_overturned():
    # Groups 2 and 6 break together; the partner search's first verdict on GOOD + {0, 1, 6}
    # is a flake, so it settles on {0, 1, 6}, which then passes twice: the search is redone
    # with that verdict corrected and finds group 2.
    flake = frozenset({0, 1, 6})
    outcome, verdicts, _ = bisect(8, lambda s: {2, 6} <= s, flakes=[flake])
    assert (outcome.status, outcome.culprit, outcome.interaction) == ("found", (2, 6), True)
    assert flake in verdicts.contested()


def test_endpoints_that_do_not_reproduce_are_judged_twice():
    outcome, verdicts, _ = bisect(4, lambda s: True)  # GOOD fails too
    assert outcome.status == "not reproduced" and "does not pass on GOOD" in outcome.detail
    assert verdicts.history[frozenset()] == [BAD, BAD]
    outcome, _, _ = bisect(4, lambda s: False, flakes=[frozenset()])  # GOOD flaked once
    assert outcome.status == "not reproduced" and "does not fail on BAD" in outcome.detail


# Simulated flaky COMMAND: the rule's promise under flakiness ------------------------


def test_flaky_preset_names_the_culprit_in_19_of_20_seeds(capsys):
    """A check that fails 30% of its runs on good envs, 24 groups, the --flaky preset."""
    scenario = simulate.Scenario(groups=24, flake=0.3)
    tally = simulate.measure(scenario, FLAKY, range(20))
    assert tally.named >= 19, tally
    many = simulate.measure(scenario, FLAKY, range(1000))
    promised = many.promised_false_blame(FLAKY, scenario)
    with capsys.disabled():  # the figures, in the test log
        print("\n" + "\n".join(simulate.summary(scenario, FLAKY, many)))
    assert many.false_blame / many.seeds <= promised < 0.01
    assert many.named / many.seeds >= 0.99
    # the per-verdict error the rule states (0.3**5), within 4 standard deviations
    e = FLAKY.good_called_bad(0.3)
    sd = math.sqrt(many.good_verdicts * e * (1 - e))
    assert abs(many.good_called_bad - many.good_verdicts * e) <= 4 * sd + 1


def test_measured_error_rate_matches_the_rule():
    """A rule with a large error (2 runs, 30% flake: 9%) checks the measurement itself."""
    rule, scenario = Rule(2, 1), simulate.Scenario(groups=16, flake=0.3)
    tally = simulate.measure(scenario, rule, range(400))
    e = rule.good_called_bad(0.3)
    measured = tally.good_called_bad / tally.good_verdicts
    assert abs(measured - e) <= 4 * math.sqrt(e * (1 - e) / tally.good_verdicts)
    assert tally.false_blame / tally.seeds <= tally.promised_false_blame(rule, scenario)


def test_strict_majority_of_five_falls_short_where_any_pass_does_not():
    """A strict majority of 5 runs (`--retries 4 --passes 3`) on the same seeds: the bar is not
    met by chance; the any-pass rule of `--flaky` is what meets it."""
    scenario = simulate.Scenario(groups=24, flake=0.3)
    assert simulate.measure(scenario, Rule(5, 3), range(20)).named < 19


def test_an_interaction_under_a_flaky_command():
    scenario = simulate.Scenario(groups=24, flake=0.3, partners=2)
    tally = simulate.measure(scenario, FLAKY, range(200))
    assert tally.false_blame == 0 and tally.named >= 198


def test_simulate_command_line(capsys):
    assert simulate.main(["--flaky", "--seeds", "50"]) == 0
    out = capsys.readouterr().out
    assert "rule: good as soon as one run passes; bad when all 5 runs fail" in out
    assert "50 seeds: named" in out
    assert simulate.main(["--flake", "1.5"]) == 2
    assert simulate.main(["--retries", "1", "--passes", "3"]) == 2
