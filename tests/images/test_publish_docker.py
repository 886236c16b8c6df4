"""publish against a real registry (ci/registry.sh: Debian's docker-registry with TLS and basic
auth): the happy path, then failures that must each leave <release>-<platform> and
latest-<platform> where they were: a refused push, a wrong password, a plain-HTTP registry,
manifest bytes changed in the registry's storage, and the candidate tag overwritten by an image
whose labels name another lock.

Needs a Docker engine and the image (built when absent), so it runs only with
PAX_CONTAINER_TESTS=1, like tests/images/test_images_docker.py.
"""

import base64
import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from pax.images import build, frozen, publish, sbom, target
from pax.images import engine as image_engine
from pax.images import registry as registry_api
from pax.paths import ROOT
from tests.images.containers import needs_engine

pytestmark = needs_engine

RELEASE = os.environ.get("PAX_CONTAINER_RELEASE", "1.4.0")
PLATFORM = "tpu"
TAGS = (f"{RELEASE}-{PLATFORM}", f"latest-{PLATFORM}")


def _docker(*args, check=True, **kw):
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, **kw)


def _target():
    return target.resolve(RELEASE, PLATFORM)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _registry_sh(state: Path, *args, **env) -> str:
    env = {**os.environ, "PAX_REGISTRY_STATE_DIR": str(state), **env}
    script = str(ROOT / "ci" / "registry.sh")
    r = subprocess.run([script, *args], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"ci/registry.sh {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout.strip()


@pytest.fixture(scope="module")
def image(docker_config):
    image_engine.require_engine()
    tag = image_engine.image_ref(RELEASE, PLATFORM)
    if not image_engine.image_exists(tag):
        build.build(target.resolve(RELEASE, PLATFORM, with_source=True))
    return tag


@pytest.fixture(scope="module")
def registry(tmp_path_factory, docker_config):
    """(HOST:PORT, state dir) of a TLS + basic-auth registry, logged in via docker_config."""
    state = tmp_path_factory.mktemp("registry")
    address = _registry_sh(state, "start", str(_free_port()))
    yield address, state
    _registry_sh(state, "stop")


@pytest.fixture(scope="module")
def published(registry, image):
    """The good image published once: the tags every failure below must leave in place."""
    return publish.publish(_target(), registry[0])


def _variant(name: str, label: str) -> str:
    """The image with one more label: a different manifest over the same layers."""
    tag = f"pax-test:{name}"
    dockerfile = f"FROM {image_engine.image_ref(RELEASE, PLATFORM)}\nLABEL {label}\n"
    _docker("build", "-q", "--network", "none", "-t", tag, "-", input=dockerfile)
    return tag


def _served(address: str) -> dict:
    return {tag: publish.registry_digest(address, "pax", tag) for tag in TAGS}


def _assert_nothing_left(address: str, before: dict) -> None:
    assert _served(address) == before
    assert f"{address}/pax" not in _docker("images", "--format", "{{.Repository}}").stdout.split()


def test_publish_over_tls_with_credentials(registry, published, image):
    address, state = registry
    digest = published["digest"]
    assert _served(address) == {tag: digest for tag in TAGS}
    assert published["refs"] == [f"{address}/pax:{tag}" for tag in TAGS]
    # Trust came from the engine's certs.d copy of the throwaway CA, credentials from the login.
    client = publish.client(address)
    assert client.ca == registry_api.CERTS_D / address / "ca.crt"
    assert client.ca.read_bytes() == (state / "ca.crt").read_bytes()
    assert client.creds == tuple((state / "credentials").read_text().strip().split(":", 1))
    assert "pax-verify: ok" in published["verify"]
    labels = json.loads(_docker("image", "inspect", image).stdout)[0]["Config"]["Labels"]
    assert published["sbom"]["sha256"] == labels[sbom.SBOM_LABEL]
    # The base went beside it, served by digest with the base's own ID as its config.
    base_repo, base_tag = frozen.base_ref("", labels["io.pax.base.id"])[1:].split(":")
    served_base = client.manifest(base_repo, base_tag)
    assert published["base"] == f"{address}/{base_repo}@{served_base[0]}"
    assert json.loads(served_base[1])["config"]["digest"] == labels["io.pax.base.id"]
    # docker-registry 2.x deletes manifests, not tags: the candidate stays, at the same digest.
    candidate = published["candidate"]
    if not candidate["deleted"]:
        assert publish.registry_digest(address, "pax", candidate["tag"]) == digest
    _assert_nothing_left(address, {tag: digest for tag in TAGS})


def test_refused_push_keeps_the_tags(registry, published, tmp_path):
    address, state = registry
    before = _served(address)
    # A read-only registry serving the same storage: it has the tags, and refuses the push.
    ro_state = tmp_path / "readonly"
    readonly = _registry_sh(
        ro_state,
        "start",
        str(_free_port()),
        PAX_REGISTRY_READONLY="1",
        PAX_REGISTRY_DATA_DIR=str(state / "data"),
    )
    try:
        assert _served(readonly) == before
        with pytest.raises(image_engine.ImageError, match=f"registry {readonly} refused the push"):
            publish.publish(_target(), readonly)
        _assert_nothing_left(readonly, before)
    finally:
        _registry_sh(ro_state, "stop")
    assert (state / "data").is_dir()
    _assert_nothing_left(address, before)


def test_wrong_password_keeps_the_tags(registry, published, tmp_path, monkeypatch):
    address, _ = registry
    before = _served(address)
    wrong = tmp_path / "docker-config"
    wrong.mkdir()
    auth = base64.b64encode(b"pax:wrong-password").decode()
    (wrong / "config.json").write_text(json.dumps({"auths": {address: {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(wrong))
    with pytest.raises(
        image_engine.ImageError, match=f"refused the credentials of pax from {wrong}"
    ):
        publish.publish(_target(), address)
    monkeypatch.undo()
    _assert_nothing_left(address, before)


def test_untrusted_certificate_keeps_the_tags(registry, published, tmp_path):
    address, _ = registry
    before = _served(address)
    other_ca = tmp_path / "other-ca.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-subj", "/CN=another CA", "-keyout", str(tmp_path / "k"), "-out", str(other_ca)],
        capture_output=True,
        check=True,
    )
    with pytest.raises(image_engine.ImageError, match="TLS certificate is not trusted by .*other"):
        publish.publish(_target(), address, ca=other_ca)
    _assert_nothing_left(address, before)


def test_plain_http_registry_is_refused(image, tmp_path):
    state = tmp_path / "plain"
    address = _registry_sh(state, "start", str(_free_port()), PAX_REGISTRY_PLAIN="1")
    try:
        with pytest.raises(image_engine.ImageError, match=f"{address} does not speak TLS"):
            publish.publish(_target(), address)
    finally:
        _registry_sh(state, "stop")


def _after_push(monkeypatch, then):
    """Run `then(ref)` right after publish's push of the candidate, before it reads it back."""
    push = publish._push

    def push_then(ref, registry):
        push(ref, registry)
        then(ref)

    monkeypatch.setattr(publish, "_push", push_then)


def test_manifest_bytes_changed_in_storage_are_refused(registry, published, monkeypatch):
    address, state = registry
    before = _served(address)
    variant = _variant("bytes", "io.pax.test=bytes")

    def rewrite_manifest(ref):
        digest = publish.registry_digest(address, "pax", ref.rsplit(":", 1)[1])
        blob = state / "data/docker/registry/v2/blobs/sha256" / digest[7:9] / digest[7:] / "data"
        blob.write_bytes(json.dumps(json.loads(blob.read_bytes()), indent=1).encode())

    _after_push(monkeypatch, rewrite_manifest)
    try:
        with pytest.raises(image_engine.ImageError, match="served bytes whose sha256 is"):
            publish.publish(_target(), address, image=variant)
    finally:
        _docker("rmi", variant, check=False)
    _assert_nothing_left(address, before)


def test_candidate_overwritten_by_another_image_is_refused(registry, published, monkeypatch):
    address, _ = registry
    before = _served(address)
    impostor = _variant("impostor", f"io.pax.lock.sha256={'0' * 64}")

    def overwrite(ref):
        _docker("tag", impostor, ref)
        _docker("push", ref)

    _after_push(monkeypatch, overwrite)
    try:
        with pytest.raises(image_engine.ImageError, match="io.pax.lock.sha256='0000"):
            publish.publish(_target(), address)
    finally:
        _docker("rmi", impostor, check=False)
    _assert_nothing_left(address, before)
