"""README.md and docs/*.md: every relative link and anchor resolves, and every nox session they
name exists (their commands are checked in tests/docs/test_examples.py)."""

import ast
import re
from pathlib import Path

import pytest

from pax.images import cli as images_cli
from pax.paths import ROOT

markdown_it = pytest.importorskip("markdown_it")

PAGES = [
    ROOT / f for f in ("README.md", "CHANGELOG.md", "CONTRIBUTING.md", "releases/README.md")
] + sorted((ROOT / "docs").glob("*.md"))


def _tokens(path: Path):
    return markdown_it.MarkdownIt("commonmark").enable("table").parse(path.read_text())


def slug(text: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    tokens, found, seen = _tokens(path), set(), {}
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            inline = tokens[i + 1]
            text = "".join(c.content for c in inline.children if c.type in ("text", "code_inline"))
            base = slug(text)
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    out = []
    for token in _tokens(path):
        for child in token.children or []:
            if child.type == "link_open":
                out.append(child.attrGet("href"))
            elif child.type == "image":
                out.append(child.attrGet("src"))
    return out


def test_there_are_at_least_eight_task_pages():
    assert len(list((ROOT / "docs").glob("*.md"))) >= 8


def test_readme_is_a_front_door():
    """Short, the documentation index near the top, and no reference tables: they are
    generated into the docs pages they belong to."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200
    assert lines.index("## Documentation") < min(30, lines.index("## Two commands"))
    assert not [line for line in lines if line.startswith("<!--")]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page):
    broken = []
    for href in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", href):  # http:, https:, mailto:
            continue
        target, _, fragment = href.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(
                f"{href}: no {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}"
            )
        elif fragment and path.suffix == ".md" and fragment not in anchors(path):
            broken.append(f"{href}: no heading #{fragment} in {path.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_slug_follows_github():
    assert slug("Will it fit?") == "will-it-fit"
    assert slug("Clusters: GKE JobSet and Slurm") == "clusters-gke-jobset-and-slurm"
    assert slug("Which package broke it? `diff` and `bisect`") == (
        "which-package-broke-it-diff-and-bisect"
    )


def nox_sessions() -> set[str]:
    """The noxfile's sessions: its decorated functions, and the image sessions it registers
    from pax.images.cli.SESSIONS (tests/environments/test_sessions.py starts every one)."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    return set(images_cli.SESSIONS) | {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any("nox.session" in ast.unparse(d) for d in node.decorator_list)
    }


def test_sessions_named_anywhere_in_the_docs_exist():
    sessions = nox_sessions()
    text = "".join(p.read_text() for p in PAGES)
    named = set(re.findall(r"\./noxw -s (\w+)", text))
    assert named - sessions == set()
