"""The release check from the registry alone, against a real registry (ci/registry.sh: Debian's
docker-registry with TLS and basic auth): the newest release's tpu image is published with a
signing key made by the documented command, then `python -m pax.images check` runs with no Docker
engine reachable. Each failure (wrong key, a tampered envelope, a missing attestation, an
attestation for another release, an image whose ID is not the recorded one) is exit 1 with one
line naming it, and leaves every tag of the registry where it was.

Needs a Docker engine to build and publish, so it runs only with PAX_CONTAINER_TESTS=1.
"""

import base64
import json
import os
import subprocess
import sys

import pytest

from pax.images import attest, build, publish, target
from pax.images import engine as image_engine
from pax.images import record as image_record
from pax.paths import ROOT
from pax.releases import catalog
from tests.images import cyclonedx_schema, intoto_protos
from tests.images.containers import needs_engine
from tests.images.test_publish_docker import _free_port, _registry_sh

pytestmark = needs_engine

TOOLS = ROOT / ".tools" / "venv"  # ./noxw's venv: the DSSE library (requirements/tools.in)
RELEASE = catalog.newest().version  # the newest release records its image IDs
PLATFORM = "tpu"


@pytest.fixture(scope="module")
def dsse():
    """securesystemslib, from the tools venv, for the tests that sign envelopes of their own."""
    site = next((TOOLS / "lib").glob("python3.*/site-packages"))
    sys.path.append(str(site))
    yield attest
    sys.path.remove(str(site))


@pytest.fixture(scope="module")
def registry(tmp_path_factory, docker_config):
    state = tmp_path_factory.mktemp("registry")
    address = _registry_sh(state, "start", str(_free_port()))
    yield address
    _registry_sh(state, "stop")


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """(private, public) made by the documented command, and another pair's public key."""
    made = []
    for name in ("publisher", "another"):
        d = tmp_path_factory.mktemp(name)
        subprocess.run(attest.KEYGEN, shell=True, cwd=d, check=True, capture_output=True)
        made.append((d / "pax-signing.pem", d / "pax-signing.pub.pem"))
    return made[0][0], made[0][1], made[1][1]


def _tools_python(*args, engine: bool = True):
    """`python -m pax.images ARGS` as ./noxw runs it; engine=False points the Docker client at
    nothing, so any use of an engine would fail."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if not engine:
        env["DOCKER_HOST"] = "unix:///nonexistent/docker.sock"
    return subprocess.run(
        [str(TOOLS / "bin" / "python"), "-m", "pax.images", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def published(registry, keys):
    image_engine.require_engine()
    if not image_engine.image_exists(image_engine.image_ref(RELEASE, PLATFORM)):
        build.build(target.resolve(RELEASE, PLATFORM, with_source=True))
    r = _tools_python("publish", RELEASE, PLATFORM, "--registry", registry, "--key", str(keys[0]))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _check(registry, tag, key, *extra):
    return _tools_python("check", f"{registry}/pax:{tag}", "--key", str(key), *extra, engine=False)


def _served(registry) -> dict:
    """Every tag of the registry's pax repository and the manifest it names."""
    client = publish.client(registry)
    status, _, body = client.request("GET", "/v2/pax/tags/list")
    assert status == 200
    return {tag: client.digest("pax", tag) for tag in json.loads(body)["tags"]}


def _failed(r, registry, before, message):
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pax images: error: "), r.stderr
    assert message in lines[0], lines[0]
    assert _served(registry) == before


def test_publish_attaches_signed_attestations_in_cosigns_layout(registry, published):
    digest = published["digest"]
    signed = published["attestations"]
    assert signed["tag"] == digest.replace(":", "-") + ".att"
    client = publish.client(registry)
    envelopes = attest.fetch(client, "pax", digest)
    assert set(envelopes) == {"provenance", "sbom"}
    for body in envelopes.values():
        envelope = json.loads(body)
        assert envelope["payloadType"] == "application/vnd.in-toto+json"
        statement = json.loads(base64.b64decode(envelope["payload"]))
        assert statement["subject"][0] == {
            "name": f"{registry}/pax",
            "digest": {"sha256": digest.removeprefix("sha256:")},
        }


def test_the_attestations_meet_their_specifications(registry, published, keys, dsse, tmp_path):
    """Judged by the specifications' own tools, not by pax's checks: each envelope verifies with
    securesystemslib's DSSE, each statement parses with in-toto's protos, the SBOM passes
    cyclonedx-python-lib's strict JSON-schema validator."""
    from securesystemslib.dsse import Envelope

    key = attest.public_key(keys[1])
    envelopes = attest.fetch(publish.client(registry), "pax", published["digest"])
    for kind, body in envelopes.items():
        envelope = Envelope.from_dict(json.loads(body))
        assert envelope.verify([key], 1) == {key.keyid: key}
        statement = json.loads(envelope.payload)
        assert intoto_protos.errors(statement) == [], kind
    sbom = attest.open_envelope(envelopes["sbom"], key, "sbom")
    (tmp_path / "sbom.cdx.json").write_text(json.dumps(sbom["predicate"]))
    assert cyclonedx_schema.errors(tmp_path / "sbom.cdx.json") == []


def test_check_from_the_registry_alone(registry, published, keys):
    r = _check(registry, f"{RELEASE}-{PLATFORM}", keys[1])
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    recorded = image_record.recorded(catalog.resolve(RELEASE))
    assert result["digest"] == published["digest"]
    assert result["image_id"] == recorded[PLATFORM]
    assert result["base"] == recorded["base_id"]
    assert result["base_kept"] == published["base"]  # publish pushed it beside the image
    assert result["source"] == catalog.resolve(RELEASE).meta["source"]
    # latest-tpu names no release: the check is told which.
    r = _check(registry, f"latest-{PLATFORM}", keys[1], "--release", RELEASE)
    assert r.returncode == 0, r.stderr


def test_another_key_is_refused(registry, published, keys):
    before = _served(registry)
    r = _check(registry, f"{RELEASE}-{PLATFORM}", keys[2])
    _failed(r, registry, before, "the provenance attestation's signature does not verify")


def _copy(registry, tag: str, config: bytes | None = None) -> str:
    """The release image's manifest under `tag` with another digest (other JSON spacing; with
    `config`, that config blob instead): an image that has no attestation yet."""
    client = publish.client(registry)
    _, body, media = client.manifest("pax", f"{RELEASE}-{PLATFORM}")
    manifest = json.loads(body)
    if config is not None:
        manifest["config"]["digest"] = client.put_blob("pax", config)
        manifest["config"]["size"] = len(config)
    return client.put_manifest("pax", tag, json.dumps(manifest, indent=2).encode(), media)


def _statements(registry, digest: str) -> list[dict]:
    """The published image's own statements, made about `digest` instead."""
    client = publish.client(registry)
    published = client.digest("pax", f"{RELEASE}-{PLATFORM}")
    docs = []
    for kind in ("provenance", "sbom"):
        envelope = json.loads(attest.fetch(client, "pax", published)[kind])
        docs.append(json.loads(base64.b64decode(envelope["payload"])))
    provenance_doc = {**docs[0], "subject": docs[0]["subject"][1:]}
    return attest.statements(f"{registry}/pax", digest, provenance_doc, docs[1]["predicate"])


def _attach(registry, digest, statements, key, edit=None):
    signer = attest.signer(key)
    envelopes = [(s["predicateType"], attest.sign(s, signer)) for s in statements]
    if edit:
        envelopes = [(p, edit(body)) for p, body in envelopes]
    attest.attach(publish.client(registry), "pax", digest, envelopes)


def test_a_missing_attestation_is_named(registry, published, keys):
    _copy(registry, f"unsigned-{PLATFORM}")
    before = _served(registry)
    r = _check(registry, f"unsigned-{PLATFORM}", keys[1], "--release", RELEASE)
    _failed(r, registry, before, "no attestation is attached to pax@sha256:")


def test_a_tampered_envelope_is_refused(registry, published, keys, dsse):
    digest = _copy(registry, f"tampered-{PLATFORM}")

    def tamper(body):  # another source revision in the payload, the signature kept
        envelope = json.loads(body)
        statement = json.loads(base64.b64decode(envelope["payload"]))
        if statement["predicateType"] == attest.SBOM_PREDICATE:
            return body
        statement["predicate"]["buildDefinition"]["externalParameters"]["source"] = {
            "digest": {"gitCommit": "f" * 40}
        }
        envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
        return json.dumps(envelope).encode()

    _attach(registry, digest, _statements(registry, digest), keys[0], edit=tamper)
    before = _served(registry)
    r = _check(registry, f"tampered-{PLATFORM}", keys[1], "--release", RELEASE)
    _failed(r, registry, before, "the provenance attestation's signature does not verify")


def test_an_attestation_for_another_release_is_named(registry, published, keys, dsse):
    digest = _copy(registry, f"other-{PLATFORM}")
    statements = _statements(registry, digest)
    params = statements[0]["predicate"]["buildDefinition"]["externalParameters"]
    params["release"] = "1.6.0"
    _attach(registry, digest, statements, keys[0])
    before = _served(registry)
    r = _check(registry, f"other-{PLATFORM}", keys[1], "--release", RELEASE)
    _failed(r, registry, before, f"disagrees with release {RELEASE}'s record: built as 1.6.0 tpu")


def test_an_image_whose_id_is_not_the_recorded_one_is_named(registry, published, keys, dsse):
    client = publish.client(registry)
    _, body, _ = client.manifest("pax", f"{RELEASE}-{PLATFORM}")
    config = json.loads(client.blob("pax", json.loads(body)["config"]["digest"]))
    config["config"]["Labels"]["org.example.rebuilt"] = "elsewhere"
    digest = _copy(registry, f"rebuilt-{PLATFORM}", config=json.dumps(config).encode())
    _attach(registry, digest, _statements(registry, digest), keys[0])
    before = _served(registry)
    r = _check(registry, f"rebuilt-{PLATFORM}", keys[1], "--release", RELEASE)
    recorded = image_record.recorded(catalog.resolve(RELEASE))[PLATFORM]
    _failed(r, registry, before, f"release {RELEASE} records {recorded[:19]}")


def test_bad_input_is_a_usage_error(registry, keys, tmp_path):
    r = _check(registry, "no-platform", keys[1])
    assert r.returncode == 2 and "names no RELEASE-PLATFORM" in r.stderr
    (tmp_path / "not-a-key.pem").write_text("hello\n")
    r = _check(registry, f"{RELEASE}-{PLATFORM}", tmp_path / "not-a-key.pem")
    assert r.returncode == 2 and "is not a public key in PEM" in r.stderr
