"""release.toml's [images] record, without an engine: written before [locks] (which relocking
rewrites as the last table), read back by tomllib, and a differing build explained cheapest
cause first."""

import datetime
import tomllib

from pax.images import record
from pax.releases import catalog
from pax.releases import compile as locks

BASE = {
    "base": "pax-base:bookworm",
    "base_id": "sha256:" + "b" * 64,
    "base_suite": "bookworm",
    "base_debian_version": "12.12",
    "base_packages": 97,
    "base_packages_sha256": "c" * 64,
}
TABLE = {
    "recorded": datetime.date(2026, 12, 6),
    **BASE,
    "builder": "buildah 1.28.2",
    "tpu": "sha256:" + "1" * 64,
    "tpu_recipe_sha256": "r" * 64,
    "tpu_layers": ["sha256:" + "2" * 64, "sha256:" + "3" * 64],
}
TOML = (
    'version = "9.1.0"\nsource = "abc"\n\n[versions]\njax = "1"\n\n[locks]  # sha256\ncpu = "x"\n'
)


def test_the_table_goes_before_locks_and_reads_back(tmp_path):
    text = record.with_table(TOML, TABLE)
    assert text.index("[images]") < text.index("[locks]")
    assert tomllib.loads(text)["images"] == TABLE
    assert tomllib.loads(text)["locks"] == {"cpu": "x"}
    # Recording again replaces the table; it is never doubled.
    again = record.with_table(text, {**TABLE, "gpu": "sha256:" + "4" * 64})
    assert again.count("[images]") == 1 and tomllib.loads(again)["images"]["gpu"].endswith("4")


def test_relocking_keeps_the_images_table(tmp_path):
    directory = tmp_path / "9.1.0"
    directory.mkdir()
    (directory / "release.toml").write_text(record.with_table(TOML, TABLE))
    locks.record_shas(catalog.load(directory), {"tpu": "y"})
    meta = catalog.load(directory).meta
    assert meta["images"] == TABLE and meta["locks"] == {"cpu": "x", "tpu": "y"}


def _facts(**changes):
    return {
        "id": "sha256:" + "9" * 64,
        "recipe": "r" * 64,
        "layers": TABLE["tpu_layers"],
        **changes,
    }


def test_a_point_release_of_the_base_is_named_first():
    base = {**BASE, "base_id": "sha256:" + "d" * 64, "base_debian_version": "12.13"}
    reasons = record.explain(TABLE, "tpu", _facts(), base, "buildah 1.28.2")
    assert reasons[0].startswith("the base differs: sha256:dddddddddddd (Debian 12.13, 97")
    assert "(Debian 12.12, 97 packages sha256 cccccccccccc) recorded" in reasons[0]


def test_another_recipe_builder_or_layer_is_named():
    layers = [TABLE["tpu_layers"][0], "sha256:" + "5" * 64]
    facts = _facts(recipe="e" * 64, layers=layers)
    reasons = record.explain(TABLE, "tpu", facts, BASE, "buildah 1.33.7")
    assert reasons == [
        f"the recipe differs: sha256 {'e' * 12} here, {'r' * 12} recorded (git log -- "
        "Dockerfile.tpu Dockerfile.gpu ci/verify_image_env.py pax/lockfile.py)",
        "the builder differs: buildah 1.33.7 here, buildah 1.28.2 recorded",
        "layers 2 of 2 differ",
    ]


def test_same_inputs_and_layers_leave_the_config():
    assert record.explain(TABLE, "tpu", _facts(), BASE, "buildah 1.28.2") == [
        "every layer is the recorded one, so the image config differs"
    ]


def test_the_newest_release_records_its_images_and_real_base():
    """What ./noxw -s verify and ./noxw -s check compare with. A release being cut has neither
    its source nor its images yet (the cut runs the tests first): the newest with a source."""
    newest = [r for r in catalog.list_releases() if r.meta.get("source")][-1]
    images = record.recorded(newest)
    assert (
        newest.meta["base_image"] == images["base"] == catalog.local_base_image(newest.base_suite)
    )
    assert images["base_suite"] == newest.base_suite
    assert images["base_id"].startswith("sha256:")
    assert all(images[p].startswith("sha256:") for p in catalog.IMAGE_PLATFORMS)
    assert images["builder"].startswith("buildah ")
    assert len(images["tpu_layers"]) >= 2
