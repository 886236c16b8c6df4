"""The image's provenance statement against a release record, and the comparison of two builds'
OCI layouts, without an engine. The statement's shape is in-toto's Statement v1 with SLSA's
Provenance v1 predicate (https://in-toto.io/Statement/v1, https://slsa.dev/provenance/v1):
`_type`, `subject[].digest`, `predicateType`, `predicate.buildDefinition.{buildType,
externalParameters, internalParameters, resolvedDependencies}`, `predicate.runDetails.builder.{id, version}`.
"""

import hashlib
import json
import urllib.parse
from pathlib import Path

import pytest

from pax.images import provenance, reproduce
from pax.releases import catalog
from tests.images import intoto_protos

SOURCE = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def release(tmp_path):
    directory = tmp_path / "releases" / "9.1.0"
    directory.mkdir(parents=True)
    for name in ("cpu", "tpu", "gpu", "test"):
        (directory / f"{name}.txt").write_text(f"{name}-lock\n")
    shas = {
        n: hashlib.sha256(f"{n}-lock\n".encode()).hexdigest() for n in ("cpu", "tpu", "gpu", "test")
    }
    locks = "\n".join(f'{n} = "{sha}"' for n, sha in shas.items())
    (directory / "release.toml").write_text(
        f'version = "9.1.0"\nsource = "{SOURCE}"\n[locks]\n{locks}\n'
    )
    return catalog.load(directory)


def _statement(release, tmp_path, revision=SOURCE, platform="tpu", python="3.11"):
    recipe = tmp_path / "Dockerfile.tpu"
    recipe.write_text("FROM base\n")
    sbom = tmp_path / "sbom.cdx.json"
    sbom.write_text("{}\n")
    return provenance.statement(
        release,
        platform,
        revision,
        "sha256:" + "b" * 64,
        recipe={"Dockerfile.tpu": recipe},
        subjects={"releases/9.1.0/tpu.txt": release.lockfile("tpu"), "sbom.cdx.json": sbom},
        command=["./noxw", "-s", "build", "--", "9.1.0", "tpu"],
        builder_version="1.28.2",
        python=python,
    )


def test_a_statement_of_the_release_agrees_with_its_record(release, tmp_path):
    doc = _statement(release, tmp_path)
    assert doc["_type"] == "https://in-toto.io/Statement/v1"
    assert doc["predicateType"] == "https://slsa.dev/provenance/v1"
    builder = doc["predicate"]["runDetails"]["builder"]
    assert builder == {"id": "urn:pax:builder:buildah", "version": {"buildah": "1.28.2"}}
    deps = {
        d["name"]: d["digest"] for d in doc["predicate"]["buildDefinition"]["resolvedDependencies"]
    }
    assert deps["source"] == {"gitCommit": SOURCE}
    assert deps["releases/9.1.0/test.txt"]["sha256"] == release.recorded_sha256("test")
    assert provenance.check(doc, release, "tpu") == []


def test_the_statement_parses_with_the_official_protos_and_names_its_builder_by_uri(
    release, tmp_path
):
    doc = _statement(release, tmp_path)
    assert intoto_protos.errors(doc) == []
    assert urllib.parse.urlsplit(doc["predicate"]["runDetails"]["builder"]["id"]).scheme
    # The parse is strict: a field SLSA v1 does not have is refused.
    doc["predicate"]["runDetails"]["builder"]["name"] = "buildah"
    assert intoto_protos.errors(doc)


def test_the_same_statement_is_the_same_bytes(release, tmp_path):
    a = provenance.write(_statement(release, tmp_path), tmp_path / "a.json")
    b = provenance.write(_statement(release, tmp_path), tmp_path / "b.json")
    assert a == b


def test_another_source_another_lock_or_platform_disagree(release, tmp_path):
    other = _statement(release, tmp_path, revision="f" * 40)
    assert any("source ffff" in p for p in provenance.check(other, release, "tpu"))
    assert provenance.check(_statement(release, tmp_path), release, "gpu")
    release.lockfile("tpu").write_text("tampered\n")
    tampered = _statement(release, tmp_path)
    assert any("lock has sha256" in p for p in provenance.check(tampered, release, "tpu"))


def test_not_a_statement(release):
    assert provenance.check({"_type": "x"}, release, "tpu") == [
        "not an in-toto https://slsa.dev/provenance/v1 statement"
    ]


def _layout(root: Path, config: dict, layers: list[bytes]) -> Path:
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return f"sha256:{digest}"

    manifest = {
        "config": {"digest": put(json.dumps(config).encode())},
        "layers": [{"digest": put(layer)} for layer in layers],
    }
    index = {"manifests": [{"digest": put(json.dumps(manifest).encode())}]}
    (root / "index.json").write_text(json.dumps(index))
    return root


def test_compare_names_the_config_fields_that_differ(tmp_path):
    a = _layout(tmp_path / "a", {"created": "1970", "config": {"Env": ["A=1"]}}, [b"same"])
    b = _layout(tmp_path / "b", {"created": "2026", "config": {"Env": ["A=1"]}}, [b"same"])
    assert reproduce.compare(a, b) == ['config created: "1970" vs "2026"']
    assert reproduce.compare(a, a) == []
