"""The check command's reading of an image reference and its attestation layout, without a
registry (tests/images/test_check_registry.py runs it against one)."""

import json

import pytest

from pax.images import attest, check
from pax.images.engine import ImageError


def test_a_release_tag_names_registry_repo_release_and_platform():
    assert check.parse_ref("127.0.0.1:5000/pax:1.7.0-tpu") == (
        "127.0.0.1:5000",
        "pax",
        "1.7.0-tpu",
        "1.7.0",
        "tpu",
    )
    assert check.parse_ref("reg.example/team/pax:latest-gpu", "1.7.0")[3:] == ("1.7.0", "gpu")


@pytest.mark.parametrize(
    "ref,release,message",
    [
        ("pax:1.7.0-tpu", None, "write REGISTRY/REPO:TAG"),
        ("127.0.0.1:5000/pax:1.7.0-cpu", None, "names no RELEASE-PLATFORM"),
        ("127.0.0.1:5000/pax:latest-tpu", None, "name its release with --release"),
    ],
)
def test_a_reference_it_cannot_read_is_a_usage_error(ref, release, message):
    with pytest.raises(ImageError, match=message) as e:
        check.parse_ref(ref, release)
    assert e.value.usage


def test_the_attestations_sit_where_cosign_keeps_them():
    digest = "sha256:" + "a" * 64
    assert attest.tag(digest) == "sha256-" + "a" * 64 + ".att"
    config, body = attest.manifest([(attest.SBOM_PREDICATE, b'{"payload": ""}')])
    manifest = json.loads(body)
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.dsse.envelope.v1+json"
    assert layer["annotations"]["predicateType"] == "https://cyclonedx.org/bom"
    assert json.loads(config)["rootfs"]["diff_ids"] == [layer["digest"]]
