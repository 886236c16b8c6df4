"""A frozen release's image ID holds: a later commit that changes the recipe and the in-image
check still builds the recorded image, and a base that is not the recorded one is refused until
the recorded base is loaded back from its archive.

The release is the newest that builds its own images (`image_recipe = "source"`) and records a
tpu image. A checkout that has none yet gets a throwaway one, cut in the scratch clone with the
newest release's locks (pax.releases.cut, its lock compile copying them, tests skipped), its
tpu image recorded there by the clone's own `python -m pax.images record`.

Needs a Docker engine, buildah and the recorded base (ci/docker-engine.sh start,
ci/base-image.sh), so it runs with PAX_CONTAINER_TESTS=1. Each build of the TPU image takes
minutes; the module builds it twice (one verify), three times with a throwaway's record.
"""

import json
import os
import shutil
import subprocess

import pytest

from pax import git, lockfile, paths
from pax.images import buildah
from pax.releases import catalog, cut, source
from tests.images.containers import needs_engine

pytestmark = needs_engine

ROOT = paths.ROOT
PLATFORM = "tpu"
THROWAWAY = "9.9.9"
PYTHON = str(paths.TOOLS_VENV / "bin" / "python")  # has the SBOM library the builds need


def _run(clone, *args, env=None, check=True):
    """A command in the clone, its pax imported from the clone."""
    r = subprocess.run(
        list(args),
        cwd=clone,
        env={**os.environ, "PYTHONPATH": str(clone), **(env or {})},
        capture_output=True,
        text=True,
    )
    if check and r.returncode != 0:
        pytest.fail(f"{' '.join(args)} exited {r.returncode}: {r.stderr[-3000:]}")
    return r


def _images(clone, *args, env=None, check=True):
    return _run(clone, PYTHON, "-m", "pax.images", *args, env=env, check=check)


def _newest_frozen(root):
    """The newest release of `root` that builds its own images and records a tpu image."""
    found = [
        r
        for r in catalog.list_releases(root)
        if source.builds_own_images(r) and PLATFORM in r.meta.get("images", {})
    ]
    return max(found, key=lambda r: lockfile.version_key(r.version), default=None)


def _cut_throwaway(clone) -> str:
    """Cut THROWAWAY in the clone with the newest release's locks, and record its tpu image."""
    newest = catalog.newest(clone)

    def copy_locks(rel, platform, root):
        shutil.copy2(newest.lockfile(platform), rel.lockfile(platform))
        return lockfile.sha256_file(rel.lockfile(platform)), 0.0, "new"

    def record(version, base_image):
        _images(clone, "record", version, PLATFORM, "--base-image", base_image)

    cut.cut(
        THROWAWAY,
        clone,
        skip_tests=True,
        compile=copy_locks,
        record_images=record,
        log=lambda *_: None,
    )
    return THROWAWAY


@pytest.fixture(scope="module")
def frozen_release(tmp_path_factory):
    """(clone, release): a scratch clone of the checkout holding a frozen release with a
    recorded tpu image; its wheelhouse linked from the checkout's where that has one."""
    clone = tmp_path_factory.mktemp("frozen") / "repo"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    for key, value in (("user.name", "Frozen Test"), ("user.email", "frozen@example.invalid")):
        git.run("config", key, value, root=clone)
    # PAX_CONTAINER_RELEASE: the release whose base this engine holds (CI: 1.8.0 on bookworm)
    wanted = os.environ.get("PAX_CONTAINER_RELEASE")
    found = catalog.resolve(wanted, clone) if wanted else _newest_frozen(clone)
    version = found.version if found else None
    wheels = ROOT / "wheelhouse" / f"{version or catalog.newest(clone).version}-{PLATFORM}"
    if wheels.is_dir():
        dest = clone / "wheelhouse" / f"{version or THROWAWAY}-{PLATFORM}"
        shutil.copytree(wheels, dest, copy_function=os.link)
    version = version or _cut_throwaway(clone)
    yield clone, catalog.resolve(version, clone)
    if version == THROWAWAY:
        subprocess.run(["docker", "rmi", f"pax:{THROWAWAY}-{PLATFORM}"], capture_output=True)


def _later_commit(clone):
    """A commit after the release that changes the recipe and the in-image check."""
    dockerfile, check = clone / "Dockerfile.tpu", clone / "ci" / "verify_image_env.py"
    dockerfile.write_text(dockerfile.read_text() + "LABEL io.pax.test.later-recipe=1\n")
    check.write_text(check.read_text() + "# a later in-image check\n")
    git.run("commit", "--quiet", "-am", "a later recipe", root=clone)


def _store(root, *args):
    """buildah on a store of the test's own (the shared one keeps its base)."""
    command = ["buildah", "--root", str(root), "--runroot", str(root / "run")]
    r = subprocess.run([*command, "--storage-driver", "vfs", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_a_later_recipe_on_a_drifted_base_is_refused_then_builds_the_recorded_image(
    frozen_release, tmp_path
):
    """One verify (two builds from scratch) shows both: a later commit's recipe does not move the
    ID, and the recorded base, loaded back from its archive, gives the recorded image."""
    clone, release = frozen_release
    recorded = release.meta["images"]
    _later_commit(clone)
    # The checkout's recipe is another now: a release built by it would get another image.
    checkout_recipe = _run(
        clone, PYTHON, "-c", f"from pax.images import context; print(context.recipe_sha256({PLATFORM!r}))"
    ).stdout.strip()  # fmt: skip
    assert checkout_recipe != recorded[f"{PLATFORM}_recipe_sha256"]
    base_image = release.meta["base_image"]
    if buildah.base_id(base_image) != recorded["base_id"]:
        pytest.fail(f"{base_image} here is not the base {release.version} records")
    archive, store = tmp_path / "base.tar", tmp_path / "store"
    base_script = str(ROOT / "ci" / "base-image.sh")
    _run(clone, base_script, "--save", str(archive))
    # The drift: the recorded base plus one label, under the base's name, in a store of its own.
    container = _store(store, "from", "--quiet", f"docker-archive:{archive}")
    _store(store, "config", "--label", "io.pax.test.drift=1", container)
    drifted = "sha256:" + _store(store, "commit", "--quiet", container, base_image)
    _store(store, "rm", container)
    assert drifted != recorded["base_id"]
    env = {"PAX_BUILDAH_ROOT": str(store)}
    for command in ("build", "verify"):
        r = _images(clone, command, release.version, PLATFORM, env=env, check=False)
        assert r.returncode == 1, r.stderr
        line = r.stderr.strip()
        assert "\n" not in line and line.startswith("pax images: error: "), line
        assert recorded["base_id"] in line and drifted in line
        assert "ci/base-image.sh --load FILE" in line
    # The recorded base back from its archive: two builds from scratch are the recorded image.
    _run(clone, base_script, "--load", str(archive), env=env)
    out = _images(clone, "verify", release.version, PLATFORM, env=env).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["image_id"] == recorded[PLATFORM]
    assert result["record"] == {"recorded": recorded[PLATFORM], "agrees": True}
    labels = json.loads(
        subprocess.run(
            ["docker", "image", "inspect", "-f", "{{json .Config.Labels}}", result["image"]],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert labels["io.pax.recipe.sha256"] == recorded[f"{PLATFORM}_recipe_sha256"]
    assert "io.pax.test.later-recipe" not in labels
