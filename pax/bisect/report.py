"""The bisect report: the verdict first and last, the rule and what the votes say about
flakiness, every step with its votes, the skipped ones with their reasons, and COMMAND's output
around the breaking change. `report.txt` and stderr get the text, `report.json` the data."""

from __future__ import annotations

import dataclasses
import math
import shlex
from pathlib import Path

from pax.bisect.groups import Group
from pax.bisect.pythons import Pythons
from pax.bisect.rule import SKIP, Rule, estimate_flake, percent
from pax.bisect.search import Outcome
from pax.bisect.steps import Step, Trials


@dataclasses.dataclass
class Findings:
    """What a bisection found: everything its report is made of (parts it did not reach stay
    empty)."""

    out: Path
    command: list[str]
    rule: Rule
    good: str = ""  # the locks' labels
    bad: str = ""
    pythons: Pythons | None = None
    groups: list[Group] = dataclasses.field(default_factory=list)
    trials: Trials | None = None
    outcome: Outcome | None = None
    versions: dict | None = None
    contested: list[str] = dataclasses.field(default_factory=list)  # labels
    error: str = ""  # an input error: the run stopped there (exit 2)
    wheel_problems: list[dict] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def steps(self) -> list[Step]:
        return self.trials.steps if self.trials else []

    def step_of(self, state) -> Step | None:
        """The last step that judged `state`."""
        steps = self.trials.history.get(state) if self.trials and state is not None else None
        return steps[-1] if steps else None

    @property
    def exit_code(self) -> int:
        if self.error:
            return 2
        found = self.outcome is not None and self.outcome.confirmed
        walk_ok = not self.versions or self.versions.get("status") != "unconfirmed"
        return 0 if found and walk_ok else 1

    @property
    def mixed(self) -> list[Step]:
        return [s for s in self.steps if s.mixed]


def _describe_groups(groups: list[Group]) -> str:
    return " + ".join(g.describe() for g in groups)


def culprit_groups(run: Findings) -> list[Group]:
    return [run.groups[i] for i in run.outcome.culprit] if run.outcome else []


def flaky_warning(run: Findings) -> str:
    if not run.mixed and not run.contested:
        return ""
    parts = []
    if run.mixed:
        parts.append(f"mixed votes in {len(run.mixed)} of {len(run.steps)} steps")
    if run.contested:
        parts.append(f"verdicts that changed on {len(run.contested)} env(s)")
    advice = "; rerun with --flaky" if run.rule.runs == 1 else ""
    return f"   [warning: COMMAND is flaky: {', '.join(parts)}{advice}]"


def verdict_line(run: Findings) -> str:
    """One line: what the bisect found. The first and the last line of the report."""
    if run.error:
        return f"RESULT   error: {run.error}"
    outcome = run.outcome
    if outcome is None:
        return "RESULT   nothing to bisect"
    warning = flaky_warning(run)
    named = _describe_groups(culprit_groups(run))
    if outcome.status == "found":
        if outcome.interaction:
            text = f"an interaction, confirmed: {named} break COMMAND only together"
        elif outcome.ambiguous and len(outcome.culprit) > 1:
            text = f"culprit confirmed among: {named} (skipped candidates kept them together)"
        else:
            text = f"culprit confirmed: {named}"
        walk = run.versions or {}
        if walk.get("status") == "found":
            text += f"; first bad release {walk['package']} {walk['first_bad']}"
        elif walk.get("status") == "unconfirmed":
            text += f"; first bad release of {walk['package']} unconfirmed"
        return f"RESULT   {text}{warning}"
    if outcome.status == "partial":
        return f"RESULT   partial: {named} breaks COMMAND, but {outcome.detail}{warning}"
    if outcome.status == "unconfirmed":
        blamed = f" (the search pointed at {named})" if named else ""
        return f"RESULT   no confirmed culprit: {outcome.detail}{blamed}{warning}"
    return f"RESULT   endpoints do not reproduce: {outcome.detail}{warning}"


def _tail_lines(text: str, n: int = 8) -> list[str]:
    return (text or "").rstrip().splitlines()[-n:]


def _judged(run: Findings, state, title: str, verdict: str) -> str:
    """`on GOOD: BAD (step 7: 0/5 passed, step 8: 0/5 passed)`: a claim and its evidence."""
    steps = run.trials.history.get(state, []) if run.trials else []
    if not steps:
        return f"{title}: not judged"
    evidence = ", ".join(f"step {s.number}: {s.tally() or s.reason}" for s in steps)
    return f"{title}: {verdict.upper()} ({evidence})"


def _culprit_lines(run: Findings) -> list[str]:
    outcome = run.outcome
    if outcome is None or not outcome.culprit:
        return []
    lines = ["culprit"]
    for i in outcome.culprit:
        group = run.groups[i]
        role = ""
        if len(outcome.culprit) > 1:
            role = "   (needed to break)" if outcome.roles.get(i) == "breaks" else ""
            role = role or "   (needed to install the others)"
        if group.python:
            lines.append(f"  {group.name}   (the interpreter, not a package)" + role)
        for change in group.changes:
            prefix = f"[{group.name}] " if len(group.changes) > 1 else ""
            lines.append(
                f"  {prefix}{change.describe()}" + ("   MAJOR" if change.major else "") + role
            )
    culprit = frozenset(outcome.culprit)
    every = frozenset(range(len(run.groups)))
    lines.append("  " + _judged(run, culprit, "on GOOD", outcome.alone))
    lines.append("  " + _judged(run, every - culprit, "BAD without it", outcome.without))
    if outcome.detail and outcome.status == "found":
        lines.append(f"  note: {outcome.detail}")
    walk = run.versions
    if walk:
        if "package" not in walk:
            lines.append(f"  --versions {walk['status']}")
        else:
            name, between = walk["package"], walk["between"]
            lines.append(
                f"  releases of {name} between {walk['good']} and {walk['bad']} on the index: "
                f"{', '.join(between) or 'none'} ({walk['env_builds']} env builds; bound "
                f"ceil(log2 {len(between) + 1}) = {walk['bound']} for a deterministic COMMAND)"
            )
            if walk["status"] == "found":
                lines.append(
                    f"  first bad release: {name} {walk['first_bad']} (last good: "
                    f"{walk['last_good']}; steps {walk['first_bad_step']} vs "
                    f"{walk['last_good_step']}, both confirmed)"
                )
            elif walk["status"] == "ambiguous":
                lines.append(
                    f"  first bad release: {name} {walk['first_bad']} or one of "
                    f"{', '.join(walk['unresolved'])} before it (skipped; last good: "
                    f"{walk['last_good']})"
                )
            else:
                lines.append(
                    f"  first bad release unconfirmed: the search ended at {name} "
                    f"{walk['first_bad']}, but its verdicts kept changing"
                )
    return lines


def _flaky_lines(run: Findings) -> list[str]:
    judged = [(s.verdict, s.votes) for s in run.steps if s.votes]
    estimate = estimate_flake(judged)
    if not run.mixed and not run.contested and not estimate.failed:
        return []
    lines = ["flaky"]
    if run.mixed:
        lines.append("  mixed votes in steps " + ", ".join(str(s.number) for s in run.mixed))
    if run.contested:
        lines.append("  verdicts changed when judged again: " + "; ".join(run.contested))
    if estimate.runs:
        rate = estimate.rate
        lines.append(
            f"  on envs judged good, {estimate.failed} of {estimate.runs} runs failed "
            f"({percent(rate)}): at that rate this rule calls a good env bad with probability "
            f"{percent(run.rule.good_called_bad(rate))} per verdict; the culprit stands on two "
            "agreeing verdicts each way"
        )
    return lines


def _steps_lines(run: Findings) -> list[str]:
    steps = run.steps
    built = [s for s in steps if s.built]
    cold = [s.build["seconds"] for s in built if s.build["kind"] == "cold"]
    warm = [s.build["seconds"] for s in built if s.build["kind"] == "warm"]
    runs = sum(len(s.runs) for s in steps)
    n = len(run.groups)
    bound = math.ceil(math.log2(n)) + 4
    walked = (run.versions or {}).get("env_builds", 0)
    lines = [
        f"steps    {len(steps)} verdicts, {len(built)} env builds"
        + (f" ({len(built) - walked} for the groups, {walked} for the releases)" if walked else "")
        + (f"; cold {sum(cold) / len(cold):.1f}s" if cold else "")
        + (f", warm {sum(warm) / len(warm):.1f}s on average" if warm else "")
        + f"; {runs} runs of COMMAND; {run.seconds:.0f}s in all"
        + (f" (deterministic single culprit: at most ceil(log2 {n}) + 4 = {bound} env builds)")
    ]
    width = max((len(s.tally()) for s in steps), default=0)
    moved = run.pythons is not None and run.pythons.moved
    for s in steps:
        lines.append(
            f"  {s.number:>2}. {s.verdict.upper():<4} {s.tally():<{width}}  "
            + (f"[Python {s.python}] " if moved else "")
            + s.label
            + (f"   [{s.why}]" if s.why not in ("search", "GOOD", "BAD") else "")
            + ("   MIXED" if s.mixed else "")
        )
    skipped = [s for s in steps if s.verdict == SKIP]
    if skipped:
        lines.append("skipped")
        lines.extend(f"  step {s.number} ({s.label}): {s.reason}" for s in skipped)
    return lines


def format_report(run: Findings) -> str:
    head = verdict_line(run)
    lines = [head, f"GOOD     {run.good}", f"BAD      {run.bad}"]
    if run.pythons:
        lines.append(f"Python   {run.pythons.describe()}")
    lines.append(f"COMMAND  {shlex.join(run.command)}")
    flags = run.rule.flags()
    lines.append(f"rule     {run.rule.describe()}" + (f" ({flags})" if flags else ""))
    if run.groups:
        changes = sum(len(g.changes) for g in run.groups)
        lines.append(f"changes  {changes} package(s) in {len(run.groups)} group(s)")
    if run.error and run.wheel_problems:
        lines.append("wheels")
        lines.extend(f"  {p['message']}" for p in run.wheel_problems)
    lines.extend(_culprit_lines(run))
    lines.extend(_flaky_lines(run))
    if run.steps:
        lines.extend(_steps_lines(run))
    outcome = run.outcome
    if outcome is not None and run.trials is not None:
        for state, title in ((outcome.last_good, "last good"), (outcome.first_bad, "first bad")):
            step = run.step_of(state)
            if step is not None:
                lines.append(f"COMMAND output, {title} env (step {step.number}, {step.label}):")
                lines.extend(f"  | {line}" for line in _tail_lines(step.output_tail) or ["(none)"])
    lines.append(f"logs     {run.out}")
    lines.append(head)
    return "\n".join(lines)


def report_json(run: Findings) -> dict:
    outcome = run.outcome
    steps = run.steps
    judged = [(s.verdict, s.votes) for s in steps if s.votes]
    estimate = estimate_flake(judged)
    versions = dict(run.versions or {})
    versions.pop("states", None)
    data = {
        "status": "error" if run.error else outcome.status if outcome else "nothing to bisect",
        "verdict": verdict_line(run).removeprefix("RESULT   "),
        "exit": run.exit_code,
        "error": run.error or None,
        "good": run.good,
        "bad": run.bad,
        "python": run.pythons.as_json() if run.pythons else None,
        "command": run.command,
        "rule": run.rule.as_json(),
        "groups": [g.as_json() for g in run.groups],
        "culprit": [g.as_json() for g in culprit_groups(run)] or None,
        "roles": {run.groups[i].name: r for i, r in outcome.roles.items()} if outcome else {},
        "confirmed": bool(outcome and outcome.confirmed),
        "interaction": bool(outcome and outcome.interaction),
        "ambiguous": bool(outcome and outcome.ambiguous),
        "alone": outcome.alone if outcome else None,
        "without": outcome.without if outcome else None,
        "detail": outcome.detail if outcome else "",
        "last_good": getattr(run.step_of(outcome.last_good if outcome else None), "number", None),
        "first_bad": getattr(run.step_of(outcome.first_bad if outcome else None), "number", None),
        "flaky": {
            "mixed_steps": [s.number for s in run.mixed],
            "contested": run.contested,
            "good_env_runs": estimate.runs,
            "good_env_failures": estimate.failed,
            "flake_rate": round(estimate.rate, 4),
            "good_called_bad": run.rule.good_called_bad(estimate.rate),
        },
        "steps": [s.as_json() for s in steps],
        "skipped": [
            {"step": s.number, "label": s.label, "reason": s.reason}
            for s in steps
            if s.verdict == SKIP
        ],
        "verdicts": len(steps),
        "env_builds": sum(s.built for s in steps),
        "runs": sum(len(s.runs) for s in steps),
        "builds": [{"step": s.number, **s.build} for s in steps if s.built],
        "wheel_problems": run.wheel_problems,
        "versions": versions or None,
        "seconds": round(run.seconds, 1),
    }
    return data
