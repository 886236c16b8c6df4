"""Validating manifests as the Kubernetes API server would: structural schemas, unknown = error.

The API server prunes fields a CRD's structural schema does not declare, silently; a manifest
field it would drop is a bug in the manifest (the setting never takes effect). So validation
here closes every object schema that lists `properties` (additionalProperties: false) unless it
says x-kubernetes-preserve-unknown-fields, and checks types, enums, required fields and
patterns with jsonschema.

The schema is the upstream one, not restated here: the JobSet CRD of kubernetes-sigs/jobset tag
v0.12.0 (config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml). controller-gen inlines the
Kubernetes types it embeds, so it also carries batch/v1's JobSpec and core/v1's PodSpec as
k8s.io/api v0.36 defines them (without their enums). It is looked for in PAX_K8S_SCHEMAS,
tests/launch/schemas/ and the shared/ directory beside the checkout (SCHEMA_DIRS).
"""

import copy
import hashlib
import os
from pathlib import Path

import jsonschema
import yaml

from pax.paths import ROOT

JOBSET_CRD = "jobset.x-k8s.io_jobsets.yaml"
JOBSET_BLOB = "96add10d030c2ab2c94b1c774edd23c814692808"  # git hash-object of the file at v0.12.0
JOBSET_SOURCE = (
    "kubernetes-sigs/jobset tag v0.12.0 (f22e565ac3cc3265c7c45ef67ecffdc689af5d77), "
    f"config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml, git blob {JOBSET_BLOB}"
)
SCHEMA_DIRS = [
    *([Path(os.environ["PAX_K8S_SCHEMAS"])] if os.environ.get("PAX_K8S_SCHEMAS") else []),
    ROOT / "tests" / "launch" / "schemas",
    ROOT.parent / "shared" / "k8s-schemas",
]


def find(name: str) -> Path | None:
    return next((d / name for d in SCHEMA_DIRS if (d / name).is_file()), None)


def closed(schema: dict) -> dict:
    """A copy of an OpenAPI v3 schema in which unknown fields are errors, as pruning makes them."""
    schema = copy.deepcopy(schema)

    def close(node):
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    return schema


def upstream_blob(text: str) -> str:
    """The git blob hash of `text` less a leading block of '#' lines (a vendoring header with the
    license and source): equal to upstream's exactly when the schema itself is unchanged."""
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    body = "".join(lines).encode()
    return hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()


def jobset_validator(crd_path: Path, version: str = "v1alpha2"):
    text = crd_path.read_text()
    if upstream_blob(text) != JOBSET_BLOB:
        raise AssertionError(f"{crd_path} is not the CRD of {JOBSET_SOURCE}")
    crd = yaml.safe_load(text)
    [served] = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return jsonschema.Draft7Validator(closed(served["schema"]["openAPIV3Schema"]))


def errors(validator, instance) -> list[str]:
    """Every violation as 'path: message', in document order."""
    found = sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in found]
