"""CONTRIBUTING.md's account of CI names the releases `.ci/run` tests, builds and verifies."""

import re

from pax.paths import ROOT


def _ci_paragraph() -> str:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    start = text.index("- CI runs `.ci/run`:")
    end = re.compile(r"\n\s*\n|\n- ").search(text, start + 1).start()
    return " ".join(text[start:end].split())


def test_contributing_names_the_releases_ci_tests_builds_and_verifies():
    script = (ROOT / ".ci" / "run").read_text()
    said = _ci_paragraph()
    tiers = re.findall(r"^\./noxw -s test -- (\d+\.\d+\.\d+)\s*(?:#.*)?$", script, re.M)
    images = re.findall(r"^\./noxw -s (build|verify) -- (\d+\.\d+\.\d+) (\w+)", script, re.M)
    assert tiers and {verb for verb, _, _ in images} == {"build", "verify"}
    for release in tiers:
        assert f"the fast tier on the newest release and on {release}" in said, said
    for verb, release, platform in images:
        said_verb = {"build": "builds", "verify": "verifies"}[verb]
        assert f"{said_verb} `pax:{release}-{platform}`" in said, said
