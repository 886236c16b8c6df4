"""The bisect report: the verdict, the steps and COMMAND's output around the breaking change."""

from __future__ import annotations

import math
import shlex

from pax.bisect.groups import Group
from pax.bisect.search import BAD, SKIP, Bisector
from pax.releases import diff as dist_diff


def _tail_lines(text: str, n: int = 8) -> list[str]:
    return [line for line in (text or "").rstrip().splitlines()][-n:]


def _versions_lines(walk: dict | None) -> list[str]:
    if not walk:
        return []
    if "package" not in walk:
        return [f"  --versions {walk['status']}"]
    name, between = walk["package"], walk["between"]
    lines = [
        f"  releases of {name} between {walk['good']} and {walk['bad']} on the index: "
        f"{', '.join(between) or 'none'} ({walk['env_builds']} env builds, bound "
        f"ceil(log2 {len(between) + 1}) = {walk['bound']})"
    ]
    if walk["status"] == "found":
        lines.append(
            f"  first bad release: {name} {walk['first_bad']} "
            f"(last good: {walk['last_good']}; step {walk['first_bad_step']} vs "
            f"{walk['last_good_step']})"
        )
    else:
        lines.append(
            f"  first bad release: {name} {walk['first_bad']} or one of "
            f"{', '.join(walk['unresolved'])} before it (skipped; last good: "
            f"{walk['last_good']})"
        )
    return lines


def format_report(
    good: dist_diff.Lock,
    bad: dist_diff.Lock,
    bis: Bisector,
    result: dict,
    command: list[str],
    seconds: float,
) -> str:
    steps = bis.steps
    lines = [
        "",
        "=" * 72,
        "pax bisect report",
        "=" * 72,
        f"GOOD     {good.label}",
        f"BAD      {bad.label}",
        f"COMMAND  {shlex.join(command)}",
        f"changes  {sum(len(g.changes) for g in bis.groups)} package(s) in "
        f"{len(bis.groups)} group(s)",
    ]
    if result["status"] != "found":
        lines.append(f"RESULT   {result['status']}")
    else:
        culprits = [
            Group(
                c["name"], tuple(ch for g in bis.groups if g.name == c["name"] for ch in g.changes)
            )
            for c in result["culprit"]
        ]
        if result.get("interaction"):
            lines.append("RESULT   an interaction: these changes break COMMAND only together")
        elif result.get("ambiguous"):
            lines.append(
                "RESULT   culprit among these groups (the states between them were "
                "skipped, so they could not be told apart)"
            )
        else:
            lines.append("RESULT   culprit found")
        for group in culprits:
            for change in group.changes:
                prefix = f"[{group.name}] " if len(group.changes) > 1 else ""
                lines.append(
                    f"  {prefix}{change.describe()}" + ("   MAJOR" if change.major else "")
                )
        alone = result.get("alone")
        if result.get("interaction"):
            lines.append(
                f"  the last change alone on GOOD: {alone}; together: "
                + ("bad (confirmed)" if result.get("culprit_confirmed") else "unconfirmed")
            )
        else:
            lines.append(
                f"  alone on top of GOOD: {alone}"
                + ("" if alone == BAD else "  (does not reproduce alone)")
            )
        lines.extend(_versions_lines(result.get("versions")))
    builds = [b for b in bis.builds if b["kind"] != "none"]
    cold = [b["seconds"] for b in builds if b["kind"] == "cold"]
    warm = [b["seconds"] for b in builds if b["kind"] == "warm"]
    n = len(bis.groups)
    bound = result.get("bound") or (math.ceil(math.log2(n)) + 3 if n > 1 else 3)
    walked = (result.get("versions") or {}).get("env_builds", 0)
    lines.append(
        f"steps    {len(steps)} env builds"
        + (f": {len(steps) - walked} for the groups" if walked else "")
        + f" (single-culprit bound: ceil(log2 {n}) + 3 = {bound})"
        + (f", {walked} for the releases" if walked else "")
        + (f"; cold {sum(cold) / len(cold):.1f}s" if cold else "")
        + (f", warm {sum(warm) / len(warm):.1f}s on average" if warm else "")
        + f"; {seconds:.0f}s in all"
    )
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
