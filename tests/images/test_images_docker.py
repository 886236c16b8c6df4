"""Container images end to end: build, smoke, publish, pull; tampered wheelhouse.

Needs a Docker engine, pax-base:bookworm and network for the first wheel download, so it runs
only with PAX_CONTAINER_TESTS=1 (CI's .ci/run sets it after ci/docker-engine.sh start and
ci/base-image.sh). The images tested are this checkout's code on a release's lock (`build --dev`,
pax:<release>-tpu-dev.<sha>), as the test session tests this checkout on a release's pins;
PAX_CONTAINER_RELEASE picks the release (default the newest). One test builds a release from its
own source (1.4.0's). The TPU image is used because its wheels are small (~370 MB; the GPU
lock's are ~3.2 GB).
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

from pax import envinfo, lockfile
from pax.images import build, buildah, context, provenance, publish, sbom, smoke, target, wheelhouse
from pax.images import engine as image_engine
from pax.paths import ROOT
from pax.releases import catalog, source
from tests.images import cyclonedx_schema
from tests.images.containers import needs_engine

pytestmark = needs_engine

RELEASE = os.environ.get("PAX_CONTAINER_RELEASE") or catalog.newest().version
BASE = catalog.local_base_image(catalog.resolve(RELEASE).base_suite)  # what its builds stand on
PLATFORM = "tpu"
SOURCE_BUILT = "1.4.0"  # a release built from its own source, older than pax env


def _docker(*args, check=True):
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


def _sh(image, script, *docker_args, check=True):
    """`sh -c SCRIPT` in the image, offline, as its user unless docker_args say otherwise."""
    return _docker(
        "run", "--rm", "--network", "none", *docker_args, "--entrypoint", "sh", image, "-c", script,
        check=check,
    )  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def engine():
    image_engine.require_engine()
    if not image_engine.image_exists(BASE):
        pytest.fail(f"{BASE} missing: run ci/base-image.sh")


@pytest.fixture
def registry(tmp_path_factory, monkeypatch):
    """A TLS + basic-auth registry (ci/registry.sh), logged in through a Docker config of the
    test's own."""
    state = tmp_path_factory.mktemp("registry")
    monkeypatch.setenv("DOCKER_CONFIG", str(state / "docker-config"))
    env = {**os.environ, "PAX_REGISTRY_STATE_DIR": str(state)}
    script = str(ROOT / "ci" / "registry.sh")
    r = subprocess.run(
        [script, "start", str(_free_port())], env=env, capture_output=True, text=True
    )
    if r.returncode != 0:
        pytest.fail(f"ci/registry.sh start: {r.stderr.strip()}")
    yield r.stdout.strip()
    subprocess.run([script, "stop"], env=env, check=True)


def _temp_build_tags():
    """What a build left behind: its temporary tag in buildah's store or in Docker."""
    out = _docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
    out += buildah.buildah("images", "--format", "{{.Name}}:{{.Tag}}").stdout.split()
    return [t for t in out if f"{image_engine.IMAGE_REPO}-build:" in t]


def _dev_image() -> str:
    """This checkout's image on RELEASE's lock (up to date, not rebuilt, when CI built it)."""
    return build.build(target.resolve(RELEASE, PLATFORM, dev=True))


def test_build_smoke_publish_pull(engine, registry, tmp_path):
    tag = _dev_image()
    # The tag names the commit the build started from (HEAD may move while it runs).
    match = re.fullmatch(rf"pax:{RELEASE}-{PLATFORM}-dev\.([0-9a-f]{{7}})(\.dirty)?", tag)
    assert match, tag
    assert not _temp_build_tags()
    release = target.resolve(RELEASE, PLATFORM)
    lock_sha = release.lock_sha256
    info = json.loads(_docker("image", "inspect", tag).stdout)[0]
    labels, config = info["Config"]["Labels"], info["Config"]
    assert labels["org.opencontainers.image.version"] == tag.removeprefix("pax:").replace(
        f"-{PLATFORM}-dev.", "-dev."
    )
    assert labels["io.pax.lock.sha256"] == lock_sha
    revision = labels["org.opencontainers.image.revision"]
    assert revision == labels["io.pax.source.revision"] and revision.startswith(match[1])
    assert revision.endswith("-dirty") == bool(match[2])
    assert labels["io.pax.recipe.sha256"] == context.recipe_sha256(PLATFORM)
    assert labels["io.pax.base.id"] == buildah.base_id(BASE)
    assert labels["org.opencontainers.image.created"]
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["PAX_RELEASE"] == RELEASE and env["PAX_LOCK_SHA256"] == lock_sha
    assert env["PAX_IMAGE"] == tag
    assert env["PAX_LOCKFILE"] == image_engine.LOCK_IN_IMAGE
    assert config["User"] not in ("", "0", "root", "0:0")
    assert config["Entrypoint"] == ["python", "-m", "pax.main"]
    # Only the runtime: no pip, no wheelhouse, no build tools; the lock is baked in.
    probe = _sh(
        tag,
        "id -u; ls /opt/venv/bin; test ! -e /wheelhouse && test ! -e /opt/build-tools "
        "&& test ! -e /paxwheel && sha256sum /opt/pax/lock.txt",
    ).stdout.split()
    assert probe[0] != "0"
    assert "pip" not in probe and "python" in probe
    assert lock_sha in probe

    result = smoke.smoke(release, image=tag, keep=tmp_path / "smoke")
    assert result["last_loss"] < result["first_loss"]
    manifest = json.loads((tmp_path / "smoke" / "job" / "manifest.json").read_text())
    assert manifest["release"] == RELEASE and manifest["lock_sha256"] == lock_sha
    assert manifest["env"]["state"] == "exact"
    assert manifest["env"]["identity"] == "/opt/venv/pax-env.json"

    published = publish.publish(release, registry, image=tag)
    digest = published["digest"]
    # A dev image goes under its own tag; the release's tag and latest name release images only.
    dev_tag = tag.removeprefix("pax:")
    assert published["refs"] == [f"{registry}/pax:{dev_tag}"]
    assert publish.registry_digest(registry, "pax", dev_tag) == digest
    assert publish.registry_digest(registry, "pax", f"latest-{PLATFORM}") is None
    assert published["provenance"]["source"] == labels["io.pax.source.revision"]
    assert "pax-verify: ok" in published["verify"]
    assert published["sbom"]["sha256"] == labels[sbom.SBOM_LABEL]

    # A real pull: drop the local image, fetch it back by digest, check it is the same image.
    image_id = _docker("image", "inspect", "-f", "{{.Id}}", tag).stdout.strip()
    _docker("rmi", tag)
    try:
        pulled = f"{registry}/pax@{digest}"
        _docker("pull", pulled)
        assert _docker("image", "inspect", "-f", "{{.Id}}", pulled).stdout.strip() == image_id
        assert "pax-verify: ok" in image_engine.verify_in_image(pulled)
    finally:
        if not image_engine.image_exists(tag):
            _docker("tag", f"{registry}/pax@{digest}", tag, check=False)
        _docker("rmi", f"{registry}/pax@{digest}", check=False)
    assert image_engine.image_exists(tag)


def _pax_env(image, *docker_args, script="python -m pax env --json"):
    r = _sh(image, script, *docker_args, check=False)
    return r.returncode, json.loads(r.stdout)


def test_image_names_its_environment_and_carries_a_valid_sbom(engine, tmp_path):
    """The image CI built (a cached rebuild otherwise): its SBOM, taken out with `docker cp`, is
    valid CycloneDX whose sha256 is the label's; `pax env` in it is exact (identity file alone,
    without the image's PAX_* variables), and drifted once a package's version changes."""
    tag = _dev_image()
    lock = target.resolve(RELEASE, PLATFORM).lock
    labels = json.loads(_docker("image", "inspect", tag).stdout)[0]["Config"]["Labels"]
    container = _docker("create", tag).stdout.strip()
    try:
        _docker("cp", f"{container}:{sbom.SBOM_IN_IMAGE}", str(tmp_path / "sbom.cdx.json"))
    finally:
        _docker("rm", container)
    path = tmp_path / "sbom.cdx.json"
    assert envinfo.sha256_file(path) == labels[sbom.SBOM_LABEL]
    assert cyclonedx_schema.errors(path) == []
    checked = sbom.check(path.read_text(), lock, RELEASE, PLATFORM)
    assert checked["components"] == len(lockfile.lock_versions(lock.read_text())) + 1

    no_vars = [f"--env={var}=" for var in envinfo.OVERRIDES]  # empty counts as unset
    code, desc = _pax_env(tag, *no_vars)
    assert code == 0 and desc["state"] == "exact" and desc["overridden_by"] == []
    assert (desc["release"], desc["platform"]) == (RELEASE, PLATFORM)
    assert desc["lock_sha256"] == labels["io.pax.lock.sha256"] == envinfo.sha256_file(lock)
    assert desc["identity"] == "/opt/venv/pax-env.json" and desc["pax"]
    assert desc["source_revision"] == labels["io.pax.source.revision"]

    # An upgrade in place, as `pip install -U` would leave absl-py's metadata (as root).
    old = lockfile.lock_versions(lock.read_text())["absl-py"]
    bump = (
        f"sed -i 's/^Version: {old}$/Version: {old}.post1/' "
        f"/opt/venv/lib/python3.11/site-packages/absl_py-{old}.dist-info/METADATA && "
        "python -m pax env --json"
    )
    code, desc = _pax_env(tag, "--user=0", script=bump)
    assert code == 1 and desc["state"] == "drifted" and desc["release"] == RELEASE
    assert desc["differences"] == [
        {"package": "absl-py", "locked": old, "installed": f"{old}.post1", "kind": "changed"}
    ]
    assert (desc["nearest"]["release"], desc["nearest"]["platform"]) == (RELEASE, PLATFORM)


def test_tampered_wheelhouse_fails_and_tags_nothing(engine, tmp_path):
    release = target.resolve(RELEASE, PLATFORM, with_source=True)
    good = wheelhouse.prepare_wheelhouse(release)
    bad = tmp_path / "wheelhouse"
    bad.mkdir()
    wheels = sorted(good.glob("*.whl"), key=lambda p: p.stat().st_size)
    victim = wheels[0]  # the smallest wheel: cheap to copy and alter
    for w in wheels:
        if w == victim:
            shutil.copy2(w, bad / w.name)
        else:
            os.link(w, bad / w.name)
    with open(bad / victim.name, "ab") as f:
        f.write(b"tampered")
    tag = "pax-test:tampered"
    _docker("rmi", tag, check=False)

    # The host-side check refuses first...
    with pytest.raises(image_engine.ImageError, match=f"wheel hash mismatch: {victim.name}"):
        build.build(release, tag=tag, wheels=bad)
    # ...and pip's --require-hashes inside the build refuses too, when the host check is skipped.
    with pytest.raises(image_engine.ImageError, match="wheel hash mismatch: pip refused") as e:
        build.build(release, tag=tag, wheels=bad, check_hashes=False)
    assert "no image tagged" in str(e.value)
    assert not image_engine.image_exists(tag)
    assert not _temp_build_tags()

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pax.images",
            "build",
            RELEASE,
            PLATFORM,
            "--wheelhouse",
            str(bad),
            "--tag",
            tag,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 1
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("pax images: error:")]
    assert len(errors) == 1 and "wheel hash mismatch" in errors[0], r.stderr
    assert not image_engine.image_exists(tag)


def test_a_release_image_holds_its_source_whatever_the_checkout(engine, tmp_path):
    """pax:1.4.0-tpu installs the pax of 1.4.0's source commit (pax.dist, no pax.envinfo), under
    this checkout's recipe: installed == lock checked by the recipe's reader, labels and identity
    naming the source, and the release's own trainer passes the smoke run."""
    rev = source.recorded(catalog.resolve(SOURCE_BUILT))
    release = target.resolve(SOURCE_BUILT, PLATFORM, with_source=True)
    tag = build.build(release)
    assert tag == f"pax:{SOURCE_BUILT}-{PLATFORM}"
    labels = json.loads(_docker("image", "inspect", tag).stdout)[0]["Config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == SOURCE_BUILT
    assert labels["org.opencontainers.image.revision"] == labels["io.pax.source.revision"] == rev
    assert labels["io.pax.recipe.sha256"] == context.recipe_sha256(PLATFORM)
    # The release's provenance statement agrees with its record (source, locks, base, SBOM).
    checked = provenance.check_image(tag, catalog.resolve(SOURCE_BUILT), PLATFORM)
    assert checked["source"] == rev and checked["builder"]["id"] == provenance.BUILDER_ID
    probe = _sh(
        tag,
        "cat /opt/venv/pax-env.json; cd /opt/venv/lib/python3.11/site-packages/pax && "
        "ls -d dist main.py _releases/*/tpu.txt; test ! -e envinfo.py && test ! -e images",
    )
    identity = envinfo.Identity.from_json(probe.stdout[: probe.stdout.rindex("}") + 1])
    assert identity.source_revision == rev and identity.release == SOURCE_BUILT
    assert f"_releases/{SOURCE_BUILT}/tpu.txt" in probe.stdout
    report = image_engine.verify_in_image(tag)
    assert "pax-verify: ok" in report and "predates" in report
    result = smoke.smoke(release, keep=tmp_path / "smoke")
    assert result["last_loss"] < result["first_loss"]
    manifest = json.loads((tmp_path / "smoke" / "job" / "manifest.json").read_text())
    assert manifest["git_revision"] == rev and manifest["image"] == tag
