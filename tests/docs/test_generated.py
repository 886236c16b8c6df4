"""Generated blocks are current, and the support matrix and the GPU XLA flags say what their
sources say: the lockfiles, release.toml, pax/launch/xla_flags.py."""

import json
import re

import pytest

from benchmarks import table as bench_table
from pax import paths
from pax.docs import blocks
from pax.launch import render, xla_flags
from pax.lockfile import parse_lockfile, versions
from pax.releases import catalog, readme

ROOT = paths.ROOT


def test_every_generated_block_is_current():
    stale = blocks.refresh(ROOT, check=True, extra=bench_table.blocks())
    assert not stale, (
        f"out of date: {[str(p.relative_to(ROOT)) for p in stale]}; run ./noxw -s readme"
    )


def test_every_block_is_somewhere():
    """Each generated block has a home, so none is rendered for nobody."""
    text = "".join((ROOT / f).read_text() for f in readme.all_files(ROOT) if (ROOT / f).is_file())
    for _, start, end in [*readme.generated(ROOT), *blocks.generated()]:
        assert start in text and end in text, f"no file holds {start}"


def _matrix_rows(text: str) -> dict[str, list[str]]:
    (block,) = readme.blocks(text, readme.MATRIX_START, readme.MATRIX_END)
    rows = [line.strip("|").split(" | ") for line in block.strip().splitlines()[2:]]
    return {cells[0].strip(): [c.strip() for c in cells] for cells in rows}


def test_support_matrix_matches_the_locks():
    """Read independently of the renderer: each row's versions are the ones its locks pin."""
    rows = _matrix_rows((ROOT / "docs" / "releases.md").read_text())
    cut = catalog.list_releases(ROOT)
    assert sorted(rows) == sorted(r.version for r in cut)
    for release in cut:
        row = rows[release.version]
        locks = {p: versions(parse_lockfile(release.lockfile(p))) for p in catalog.LOCK_PLATFORMS}
        assert row[1] == ", ".join(release.pythons)
        assert row[2] == f"{locks['cpu']['jax']} / {locks['cpu']['jaxlib']}"
        assert (release.pins["jax"], release.pins["jaxlib"]) == (
            locks["cpu"]["jax"],
            locks["cpu"]["jaxlib"],
        ), f"{release.version}: release.toml's headline pins differ from its cpu lock"
        assert row[4] == locks["tpu"]["libtpu"]
        gpu = locks["gpu"]
        cuda = "13" if "jax-cuda13-plugin" in gpu else "12"  # NVIDIA drops -cu12 at CUDA 13
        suffix = "" if cuda == "13" else "-cu12"
        assert row[5].split(", ") == [
            gpu[f"jax-cuda{cuda}-plugin"],
            gpu[f"nvidia-cuda-runtime{suffix}"],
            gpu[f"nvidia-cudnn-cu{cuda}"],
            gpu[f"nvidia-cublas{suffix}"],
        ]
        assert f"`pax:{release.version}-gpu`" in row[6]
        own_tree = release.meta.get("image_recipe") == "source"
        assert row[7] == ("frozen: its own tree" if own_tree else "today's recipe")


def test_support_matrix_test_fails_on_a_changed_lock(tmp_path):
    """A lock moved under the matrix makes the committed block stale."""
    for release in catalog.list_releases(ROOT):
        dest = tmp_path / "releases" / release.version
        dest.mkdir(parents=True)
        for f in release.dir.iterdir():
            (dest / f.name).write_bytes(f.read_bytes())
    newest = catalog.newest(tmp_path)
    (tmp_path / "README.md").write_text(
        f"{readme.MATRIX_START}\n\n{readme.support_matrix(tmp_path)}\n\n{readme.MATRIX_END}\n"
    )
    assert readme.refresh(tmp_path, ["README.md"], check=True) == []
    lock = newest.lockfile("tpu")
    lock.write_text(re.sub(r"^libtpu==\S+", "libtpu==9.9.9", lock.read_text(), flags=re.M))
    assert readme.refresh(tmp_path, ["README.md"], check=True) == [tmp_path / "README.md"]


def test_every_release_has_a_changelog_section():
    text = (ROOT / "CHANGELOG.md").read_text()
    for release in catalog.list_releases(ROOT):
        assert re.search(rf"^## {re.escape(release.version)}\b", text, re.M), release.version
        start, _ = readme.changelog_markers(release.version)
        assert start in text


def test_dockerfile_takes_the_gpu_flags_from_the_module():
    text = (ROOT / "Dockerfile.gpu").read_text()
    values = re.findall(r'^ENV XLA_FLAGS="([^"]*)"', text, re.M)
    assert values == [xla_flags.value()]


@pytest.mark.parametrize("target", ["gpu", "slurm"])
def test_launch_templates_take_the_gpu_flags_from_the_module(target):
    text = render.render("1.6.0", target, "LmCloudSpmdTiny")
    if target == "gpu":
        assert f"value: {json.dumps(xla_flags.value())}" in text
    else:
        assert f'export XLA_FLAGS="{xla_flags.value()}${{XLA_FLAGS:+ $XLA_FLAGS}}"' in text


def test_docs_flags_are_the_module_flags():
    pages = [p for p in (ROOT / "docs").glob("*.md") if xla_flags.DOCS_START in p.read_text()]
    assert pages, "a docs page shows the GPU XLA flags"
    for flag, _ in xla_flags.GPU_XLA_FLAGS:
        assert all(flag in p.read_text() for p in pages)
