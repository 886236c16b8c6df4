"""The repository speaks of the product, never of how it was made: no tracker numbers, work
periods or "measured on this VM last time" in code, comments, tests or docs."""

import re
import subprocess

import pytest

from pax.paths import ROOT

PHRASES = re.compile(
    r"\bissue #?\d+\b|\(#\d+\)|\b(first|second|third|fourth|fifth|sixth|seventh|eighth|"
    r"previous|earlier) (work )?session\b|\bthis VM\b|\blast time\b|"
    r"\bthrowaway (script|microbenchmark)\b|\bnot committed\b|\(issue\b|\bthe issue's\b",
    re.I,
)


def _text_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [
        f
        for f in listed
        if not re.search(r"\.(png|json|txt|whl|gz)$", f)
        and (ROOT / f).is_file()
        and f != "tests/docs/test_wording.py"  # it spells the phrases out
    ]


@pytest.mark.parametrize("name", _text_files())
def test_no_words_about_how_the_project_was_made(name):
    lines = (ROOT / name).read_text(errors="replace").splitlines()
    found = [
        f"{name}:{i}: {line.strip()}" for i, line in enumerate(lines, 1) if PHRASES.search(line)
    ]
    assert not found, "\n".join(found)
