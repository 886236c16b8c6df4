"""pax.releases.readme: the releases tables are generated from release.toml and cannot drift."""

import pytest

from pax import paths
from pax.releases import catalog as release
from pax.releases import readme

ROOT = paths.ROOT


def test_releases_readme_has_a_marked_table():
    assert readme.START in (ROOT / "releases" / "README.md").read_text()


@pytest.mark.parametrize("name", readme.FILES)
def test_committed_tables_equal_the_generated_one(name):
    """Every marked block equals the table rendered from releases/*/release.toml."""
    path = ROOT / name
    text = path.read_text() if path.is_file() else ""
    if readme.START not in text:
        pytest.skip(f"{name} has no releases table markers")
    table = readme.releases_table(ROOT)
    assert readme.blocks(text), f"{name}: unpaired markers"
    for block in readme.blocks(text):
        assert block == f"\n\n{table}\n\n", (
            f"{name}'s releases table differs from releases/*/release.toml; run ./noxw -s readme"
        )
    assert readme.refresh(ROOT, [name], check=True) == []


def test_table_lists_every_release_newest_first():
    table = readme.releases_table(ROOT).splitlines()
    assert table[0] == (
        "| release | date | branch | jax / jaxlib | flax | optax | "
        "orbax-checkpoint | tensorstore | Python |"
    )
    rows = [line.split(" | ")[0].lstrip("| ") for line in table[2:]]
    cut = [r.version for r in release.list_releases(ROOT)]
    assert rows == cut[::-1]
    newest = release.newest(ROOT)
    pins = newest.pins
    assert table[2] == (
        f"| {newest.version} | {newest.meta['date'].isoformat()} | "
        f"r{newest.version} | {pins['jax']} / {pins['jaxlib']} | {pins['flax']} | "
        f"{pins['optax']} | {pins['orbax-checkpoint']} | {pins['tensorstore']} | "
        f"{', '.join(newest.pythons)} |"
    )


def test_rewrite_replaces_every_block_and_is_idempotent():
    text = (
        f"# A\n{readme.START}\nold table\n{readme.END}\nmiddle\n{readme.START}{readme.END}\nend\n"
    )
    once = readme.rewrite_text(text, "| t |")
    assert once == (
        f"# A\n{readme.START}\n\n| t |\n\n{readme.END}\nmiddle\n"
        f"{readme.START}\n\n| t |\n\n{readme.END}\nend\n"
    )
    assert readme.rewrite_text(once, "| t |") == once
    assert readme.rewrite_text("no markers\n", "| t |") == "no markers\n"


@pytest.mark.parametrize(
    "text,problem",
    [
        (f"{readme.START}\nx\n", "without"),
        (f"x\n{readme.END}\n", "unpaired"),
        (f"{readme.START}\n{readme.START}\n{readme.END}\n", "nested"),
    ],
)
def test_bad_markers_are_refused(text, problem):
    with pytest.raises(readme.ReadmeError, match=problem):
        readme.rewrite_text(text, "| t |", "F.md")


def test_refresh_rewrites_only_marked_files(tmp_path):
    for version, jax in (("1.0.0", "0.1.0"), ("1.10.0", "0.2.0"), ("1.2.0", "0.1.5")):
        d = tmp_path / "releases" / version
        d.mkdir(parents=True)
        (d / "release.toml").write_text(
            f'version = "{version}"\ndate = 2026-01-02\nbranch = "r{version}"\npython = "3.11"\n'
            f'[versions]\njax = "{jax}"\njaxlib = "{jax}"\nflax = "1"\noptax = "2"\n'
            f'orbax-checkpoint = "3"\ntensorstore = "4"\n'
        )
    (tmp_path / "README.md").write_text(f"top\n{readme.START}\n{readme.END}\n")
    (tmp_path / "releases" / "README.md").write_text("no markers here\n")
    assert readme.refresh(tmp_path) == [tmp_path / "README.md"]
    text = (tmp_path / "README.md").read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| 1.")]
    assert [r.split(" | ")[0] for r in rows] == ["| 1.10.0", "| 1.2.0", "| 1.0.0"]  # numeric order
    assert rows[0] == "| 1.10.0 | 2026-01-02 | r1.10.0 | 0.2.0 / 0.2.0 | 1 | 2 | 3 | 4 | 3.11 |"
    assert (tmp_path / "releases" / "README.md").read_text() == "no markers here\n"
    assert readme.refresh(tmp_path) == []


def test_a_new_release_gets_its_changelog_section(tmp_path):
    (tmp_path / "CHANGELOG.md").write_text(
        "# Changelog\n\n## Unreleased\n\n- x\n\n## 1.0.0\n\nold\n"
    )
    assert readme.add_changelog_section(tmp_path, "1.1.0")
    text = (tmp_path / "CHANGELOG.md").read_text()
    start, end = readme.changelog_markers("1.1.0")
    assert text.index("## Unreleased") < text.index("## 1.1.0") < text.index("## 1.0.0")
    assert f"## 1.1.0\n\n{start}\n{end}\n\n## 1.0.0" in text
    assert not readme.add_changelog_section(tmp_path, "1.1.0")


def test_the_newcomers_pages_name_the_newest_release():
    text = (
        "./noxw -s train -- 1.6.0 tpu --exp=X\n.venv/pax-1.6.0-cpu/bin/python\n"
        "docker run pax:1.5.0-gpu\nci/gpu_check.sh 1.6.0\n`releases/1.6.0/release.toml`\n"
        "pax 1.4.0 is not paxml 1.4.0; ./noxw -s diff -- A B\n"
    )
    assert readme.name_newest_release(text, "1.9.0") == (
        "./noxw -s train -- 1.9.0 tpu --exp=X\n.venv/pax-1.9.0-cpu/bin/python\n"
        "docker run pax:1.9.0-gpu\nci/gpu_check.sh 1.9.0\n`releases/1.9.0/release.toml`\n"
        "pax 1.4.0 is not paxml 1.4.0; ./noxw -s diff -- A B\n"
    )
