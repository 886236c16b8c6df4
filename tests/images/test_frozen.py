"""What a cut release holds fixed, without an engine: the tools its own tree stages with (read
from its tools lock's "# via" lines), the refusal of a base or builder that is not the recorded
one, and the refusal to rewrite a record. The builds themselves: test_frozen_docker.py."""

import dataclasses
import shutil
import subprocess
import sys

import pytest

from pax.images import frozen, record, target
from pax.images.engine import ImageError
from pax.images.target import PaxSource
from pax.lockfile import version_key
from pax.paths import ROOT
from pax.releases import catalog, source

# A pip-compile lock's layout: one "# via" name, a "# via" list, an unsafe pin at the end.
LOCK = """\
#
#    ./noxw -s lock -- tools
#
boolean-py==5.0 \\
    --hash=sha256:aa
    # via license-expression
cyclonedx-python-lib==11.12.0 \\
    --hash=sha256:bb
    # via -r requirements/tools.in
license-expression==30.4.4 \\
    --hash=sha256:cc
    # via cyclonedx-python-lib
nox==2025.1.1 \\
    --hash=sha256:dd
    # via -r requirements/tools.in
packaging==25.0 \\
    --hash=sha256:ee
    # via
    #   nox
    #   pip-tools
typing-extensions==4.16.0 \\
    --hash=sha256:ff
    # via
    #   cyclonedx-python-lib
    #   nox

# The following packages are considered to be unsafe in a requirements file:
pip==26.3 \\
    --hash=sha256:11
    # via pip-tools
setuptools==84.2.1 \\
    --hash=sha256:22
    # via pip-tools
"""


def test_the_tools_are_the_roots_and_what_they_need_at_the_locks_pins():
    pins = frozen.tool_pins(LOCK)
    assert [(p.name, p.version) for p in pins] == [
        ("boolean-py", "5.0"),  # via license-expression, via cyclonedx-python-lib
        ("cyclonedx-python-lib", "11.12.0"),
        ("license-expression", "30.4.4"),
        ("packaging", "25.0"),
        ("pip", "26.3"),
        ("setuptools", "84.2.1"),
        ("typing-extensions", "4.16.0"),  # needed by cyclonedx, whatever else needs it too
    ]
    assert all(p.hashes for p in pins)  # installed hash-checked
    assert "nox" not in {p.name for p in pins}


def test_a_tools_lock_without_a_root_is_refused():
    with pytest.raises(ImageError, match=r"pins no setuptools$"):
        frozen.tool_pins(LOCK.replace("setuptools==", "setuptoolz=="))


def test_the_checkouts_tools_lock_gives_the_sbom_writer_what_it_imports():
    """The staging interpreter of a release cut from this checkout: the SBOM writer and the
    pax wheel build import these, and pip-compile's lock lists their dependencies."""
    names = {p.name for p in frozen.tool_pins((ROOT / frozen.TOOLS_LOCK).read_text())}
    assert set(frozen.TOOL_ROOTS) <= names
    assert {"license-expression", "packageurl-python", "py-serializable"} <= names
    assert not {"nox", "ruff", "matplotlib"} & names


def _target(images, dev=False, meta=None):
    release = catalog.resolve("1.7.0")
    release = dataclasses.replace(release, meta={**release.meta, "images": images, **(meta or {})})
    origin = PaxSource("f" * 40 + ("-dirty" if dev else ""), dev, 0)
    return dataclasses.replace(target.resolve("1.7.0", "tpu"), release=release, source=origin)


RECORD = {
    "base_id": "sha256:" + "a" * 64,
    "base_debian_version": "12.15",
    "builder": "buildah 1.28.2",
}


def test_a_base_that_is_not_the_recorded_one_is_refused_naming_both():
    drifted = "sha256:" + "d" * 64
    with pytest.raises(ImageError) as e:
        frozen.require_recorded(_target(RECORD), drifted, "1.28.2")
    assert str(e.value) == (
        f"release 1.7.0 records base {RECORD['base_id']} (Debian 12.15), but pax-base:bookworm "
        f"is {drifted}: a build there would not be the recorded image; bring the recorded base "
        "back with ci/base-image.sh --load FILE (an archive ci/base-image.sh --save wrote) or "
        f"pass --base-image REGISTRY/pax-base:{'a' * 64} (publish pushes it there)"
    )


def test_another_builder_is_refused():
    with pytest.raises(ImageError, match=r"buildah 1.28.2, this machine has buildah 1.33.7"):
        frozen.require_recorded(_target(RECORD), RECORD["base_id"], "1.33.7")


def test_the_recorded_base_and_builder_a_dev_build_or_no_record_pass():
    frozen.require_recorded(_target(RECORD), RECORD["base_id"], "1.28.2")
    frozen.require_recorded(_target(RECORD, dev=True), "sha256:" + "d" * 64, "1.33.7")
    frozen.require_recorded(_target({}), "sha256:" + "d" * 64, "1.33.7")


def test_releases_say_who_builds_their_images():
    """Releases up to 1.7.0 are built by today's recipe; a release that says so, by its tree."""
    older = [r for r in catalog.list_releases() if version_key(r.version) <= version_key("1.7.0")]
    assert len(older) == 5 and not any(source.builds_own_images(r) for r in older)
    own = _target(RECORD, meta={source.IMAGE_RECIPE: source.OWN_TREE}).release
    assert source.builds_own_images(own)


def test_a_record_is_never_rewritten(tmp_path):
    """`python -m pax.images record` on a release that has a record: one line, exit 1, before
    any engine is asked (git alone on PATH: no docker, no buildah), release.toml as it was."""
    (tmp_path / "git").symlink_to(shutil.which("git"))
    release = catalog.resolve("1.7.0")
    toml = (release.dir / "release.toml").read_text()
    images = record.recorded(release)
    r = subprocess.run(
        [sys.executable, "-m", "pax.images", "record", "1.7.0", "tpu"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": str(tmp_path), "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 1
    assert r.stderr == (
        f"pax images: error: release 1.7.0 records its images already (tpu "
        f"{images['tpu'][:19]}, gpu {images['gpu'][:19]}, recorded {images['recorded']}); a cut "
        "release's image IDs never change: compare a build with them, ./noxw -s verify -- "
        "1.7.0 tpu\n"
    )
    assert (release.dir / "release.toml").read_text() == toml
