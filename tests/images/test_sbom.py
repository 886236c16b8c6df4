"""pax.images.sbom: the image's CycloneDX SBOM, made from a lock and its wheels (no Docker).

Tiny wheels stand in for the lock's (tests/bisect/wheels.py), each declaring its license one of
the ways real wheels do. Validity is judged by cyclonedx-python-lib's strict JSON validator
against the CycloneDX 1.6 schema it ships (tests/images/cyclonedx_schema.py).
"""

import dataclasses
import hashlib
import json
import zipfile

import pytest

from pax.images import context, paxwheel, sbom, target
from pax.images.engine import ImageError
from pax.releases import catalog
from tests.bisect import wheels
from tests.images import cyclonedx_schema

PINS = {"alpha": "1.0", "beta-pkg": "2.0", "gamma": "0.1", "delta": "3.1"}
METADATA = {
    "alpha": "License-Expression: MIT OR Apache-2.0\n",  # PEP 639
    "beta-pkg": "License: Apache-2.0\n",  # a short License field holding an SPDX id
    "gamma": "License: " + "Permission is hereby granted ...\n        " * 3 + "\n"
    "Classifier: License :: OSI Approved :: BSD License\n",  # a license text: the classifier
    "delta": "",  # nothing declared
}
REQUIRES = {
    "alpha": ("beta-pkg>=1", "gamma; python_version < '3'", "delta; extra == 'x'"),
    "beta-pkg": ("gamma", "delta; python_version >= '3.12'"),
}


@pytest.fixture
def inputs(tmp_path):
    house = tmp_path / "wheelhouse"
    house.mkdir()
    for name, version in PINS.items():
        wheels.build_wheel(
            house, name, version, requires=REQUIRES.get(name, ()), metadata=METADATA[name]
        )
    lock = wheels.write_lock(tmp_path / "tpu.txt", PINS, house)
    pax = wheels.build_wheel(tmp_path, "pax", "1.6.0", metadata="License: Apache-2.0\n")
    return lock, house, pax


def _target(lock, python="3.11"):
    """Release 9.9.9's tpu image, as the build resolves it, on the fixture's lock."""
    release = catalog.Release("9.9.9", lock.parent, {"python": python})
    source = target.PaxSource("ab" * 20, dev=False, epoch=1_700_000_000)
    return target.Target(release, "tpu", lock, wheels.sha256(lock), source=source)


def _write(inputs, out):
    lock, house, pax = inputs
    return context.write_sbom(_target(lock), house, pax, out)


def test_sbom_is_valid_cyclonedx_naming_every_pin_its_wheel_and_license(inputs, tmp_path):
    out = tmp_path / "sbom.cdx.json"
    digest = _write(inputs, out)
    assert cyclonedx_schema.errors(out) == []
    bom = json.loads(out.read_text())
    assert bom["metadata"]["component"]["version"] == "9.9.9-tpu"
    parts = {c["name"]: c for c in bom["components"]}
    assert {n: c["version"] for n, c in parts.items()} == {**PINS, "pax": "1.6.0"}
    lock, house, _ = inputs
    assert parts["beta-pkg"]["purl"] == "pkg:pypi/beta-pkg@2.0"
    assert parts["gamma"]["hashes"] == [
        {"alg": "SHA-256", "content": wheels.sha256(house / "gamma-0.1-py3-none-any.whl")}
    ]
    assert parts["alpha"]["licenses"] == [
        {"acknowledgement": "declared", "expression": "MIT OR Apache-2.0"}
    ]
    assert parts["beta-pkg"]["licenses"] == [
        {"license": {"acknowledgement": "declared", "id": "Apache-2.0"}}
    ]
    assert parts["gamma"]["licenses"] == [
        {"license": {"acknowledgement": "declared", "name": "BSD License"}}
    ]
    assert "licenses" not in parts["delta"]
    # Requires-Dist edges that hold in the image: markers false for its Python 3.11 (whatever
    # runs this) and extras left out.
    deps = {d["ref"]: sorted(d.get("dependsOn", [])) for d in bom["dependencies"]}
    assert deps["pkg:pypi/alpha@1.0"] == ["pkg:pypi/beta-pkg@2.0"]
    assert deps["pkg:pypi/beta-pkg@2.0"] == ["pkg:pypi/gamma@0.1"]
    assert len(deps["pax-image:9.9.9-tpu"]) == len(PINS) + 1
    assert sbom.check(out.read_text(), lock, "9.9.9", "tpu") == {
        "components": 5,
        "with_license": 4,
        "pax": "1.6.0",
    }
    # The same inputs, the same bytes (so an unchanged rebuild keeps its label).
    assert _write(inputs, tmp_path / "again.json") == digest


def test_the_sbom_describes_the_images_python_not_the_hosts(inputs, tmp_path):
    """A release on 3.12 and 3.13 runs trixie's python3 3.13: the subject says so, and the
    edges are those 3.13 takes."""
    lock, house, pax = inputs
    out = tmp_path / "sbom.cdx.json"
    context.write_sbom(_target(lock, ["3.12", "3.13"]), house, pax, out)
    bom = json.loads(out.read_text())
    props = {p["name"]: p["value"] for p in bom["metadata"]["component"]["properties"]}
    assert props["pax:python"] == "3.13"
    deps = {d["ref"]: sorted(d.get("dependsOn", [])) for d in bom["dependencies"]}
    assert deps["pkg:pypi/beta-pkg@2.0"] == ["pkg:pypi/delta@3.1", "pkg:pypi/gamma@0.1"]
    assert context.image_identity(_target(lock, ["3.12", "3.13"])).python == "3.13"


def test_a_wheel_the_lock_does_not_list_is_refused(inputs, tmp_path):
    lock, house, pax = inputs
    victim = house / "gamma-0.1-py3-none-any.whl"
    with open(victim, "ab") as f:
        f.write(b"tampered")
    with pytest.raises(
        ImageError,
        match="wheel hash mismatch: gamma-0.1-py3-none-any.whl has a sha256 that .* does not list",
    ):
        _write(inputs, tmp_path / "sbom.json")
    assert not (tmp_path / "sbom.json").exists()
    # With the host checks off (the build then leans on pip's --require-hashes), the SBOM
    # records the wheel's own digest, never the lock's: it describes what is in the context.
    out = tmp_path / "unverified.json"
    context.write_sbom(_target(lock), house, pax, out, verify_hashes=False)
    gamma = next(c for c in json.loads(out.read_text())["components"] if c["name"] == "gamma")
    assert gamma["hashes"][0]["content"] == hashlib.sha256(victim.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda b: b.update(specVersion="1.5"), "not CycloneDX 1.6"),
        (lambda b: b["metadata"]["component"].update(version="9.9.9-gpu"), "not pax 9.9.9-tpu"),
        (lambda b: b["components"][0].update(version="1.1"), "alpha==1.1 is not in"),
        (lambda b: b["components"][1]["hashes"][0].update(content="00" * 32), "beta-pkg's hash"),
        (lambda b: b["components"].pop(2), "no component for delta"),
    ],
)
def test_check_refuses_an_sbom_that_is_not_the_lock(inputs, tmp_path, edit, message):
    out = tmp_path / "sbom.json"
    _write(inputs, out)
    bom = json.loads(out.read_text())
    edit(bom)
    with pytest.raises(ImageError, match=message):
        sbom.check(json.dumps(bom), inputs[0], "9.9.9", "tpu")


def test_a_pin_the_gpu_recipe_leaves_out_is_named_not_listed(inputs, tmp_path):
    """The GPU recipe removes cuSOLVER (Dockerfile.gpu): its SBOM names it on the image, not as
    a component, and the dependency graph keeps only what is there."""
    _, house, pax = inputs
    wheels.build_wheel(house, "nvidia-cusolver-cu12", "11.7.1")
    wheels.build_wheel(house, "plugin", "0.5", requires=("nvidia-cusolver-cu12", "gamma"))
    pins = {**PINS, "nvidia-cusolver-cu12": "11.7.1", "plugin": "0.5"}
    lock = wheels.write_lock(tmp_path / "gpu.txt", pins, house)
    gpu = dataclasses.replace(_target(lock), platform="gpu")
    out = tmp_path / "sbom.json"
    context.write_sbom(gpu, house, pax, out)
    assert cyclonedx_schema.errors(out) == []
    bom = json.loads(out.read_text())
    assert {c["name"] for c in bom["components"]} == {*PINS, "plugin", "pax"}
    subject = bom["metadata"]["component"]
    assert {"name": "pax:left_out", "value": "nvidia-cusolver-cu12"} in subject["properties"]
    deps = {d["ref"]: d.get("dependsOn", []) for d in bom["dependencies"]}
    assert deps["pkg:pypi/plugin@0.5"] == ["pkg:pypi/gamma@0.1"]
    checked = sbom.check(out.read_text(), lock, "9.9.9", "gpu")
    assert (checked["components"], checked["left_out"]) == (6, ["nvidia-cusolver-cu12"])
    # Listed although named as left out, or named left out of a pin the lock lacks: refused.
    listed = json.loads(out.read_text())
    digest = wheels.sha256(house / "nvidia_cusolver_cu12-11.7.1-py3-none-any.whl")
    cusolver = {"name": "nvidia-cusolver-cu12", "version": "11.7.1"}
    listed["components"].append({**cusolver, "hashes": [{"alg": "SHA-256", "content": digest}]})
    with pytest.raises(ImageError, match="lists nvidia-cusolver-cu12, which it also names as"):
        sbom.check(json.dumps(listed), lock, "9.9.9", "gpu")
    without = wheels.write_lock(tmp_path / "without.txt", {**PINS, "plugin": "0.5"}, house)
    with pytest.raises(ImageError, match="names nvidia-cusolver-cu12 as left out, which .* does"):
        sbom.check(out.read_text(), without, "9.9.9", "gpu")


def test_the_recipes_left_out_pins_are_those_its_dockerfiles_remove():
    """Read from the recipe itself: the GPU image removes cuSOLVER by the name its CUDA major's
    lock pins (nvidia-cusolver-cu12 for CUDA 12, nvidia-cusolver for 13), the TPU image nothing."""
    cuda12 = catalog.resolve("1.8.0").lock("gpu").versions
    assert context.left_out("tpu", cuda12) == []
    assert context.left_out("gpu", cuda12) == ["nvidia-cusolver-cu12"]
    assert context.left_out("gpu", {"jax", "nvidia-cusolver", "nvidia-cublas"}) == [
        "nvidia-cusolver"
    ]


def test_the_image_identity_names_the_lock_inside_the_image(inputs):
    lock, _, _ = inputs
    ident = context.image_identity(_target(lock))
    assert (ident.lockfile, ident.lock_sha256) == ("/opt/pax/lock.txt", wheels.sha256(lock))
    assert ident.locked == PINS and ident.python == "3.11"


def test_the_pax_wheel_carries_the_release_locks(tmp_path):
    checkout = target.resolve(catalog.newest().version, "tpu", dev=True)
    wheel = paxwheel.build(tmp_path, checkout)
    names = set(zipfile.ZipFile(wheel).namelist())
    for release in catalog.list_releases():
        assert f"pax/_releases/{release.version}/cpu.txt" in names
