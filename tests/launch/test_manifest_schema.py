"""Every generated JobSet validates against the real API schema (tests/launch/k8s_schema.py):
the JobSet CRD of kubernetes-sigs/jobset v0.12.0, closed as the API server's pruning makes it."""

import copy

import pytest
import yaml

from pax.launch import render as cluster
from tests.launch import k8s_schema

RELEASE = "1.4.0"
# target -> [(experiment, overrides, render options)]: the reference experiments as the other
# launch tests render them, plus the data-parallel one at an explicit size.
CASES = [
    ("tpu", "LmCloudSpmd2BLimitSteps", [], {}),
    ("tpu", "C4Spmd16BAdam32Replicas", ["NUM_TRAIN_STEPS=100"], {"registry": "r.example/ml"}),
    ("tpu", "C4SpmdPipelineGpt3SmallAdam64Replicas", [], {}),
    ("tpu", "LmCloudTransformerAdamLimitSteps", [], {"tpu": "v4-32"}),
    ("gpu", "C4Spmd1BAdam4Replicas", [], {"gpus_per_host": 4}),
    ("gpu", "C4Spmd16BAdam32Replicas", ["ICI_MESH_SHAPE=[1,8,4]"], {"name": "a" * 45}),
    ("gpu", "C4SpmdPipelineGpt3SmallAdam64Replicas", [], {"pvc": "team-runs"}),
    ("gpu", "LmCloudTransformerAdamLimitSteps", [], {"hosts": 2}),
]


def _schema(name):
    path = k8s_schema.find(name)
    if path is None:
        pytest.skip(
            f"{name} is in none of {', '.join(map(str, k8s_schema.SCHEMA_DIRS))}"
            + f" (from {k8s_schema.JOBSET_SOURCE})"
        )
    return path


@pytest.fixture(scope="module")
def jobset():
    return k8s_schema.jobset_validator(_schema(k8s_schema.JOBSET_CRD))


def _render(target, exp, sets, options):
    return yaml.safe_load(cluster.render(RELEASE, target, exp, sets, **options))


@pytest.mark.parametrize("target,exp,sets,options", CASES)
def test_every_generated_jobset_validates_against_the_crd(jobset, target, exp, sets, options):
    assert k8s_schema.errors(jobset, _render(target, exp, sets, options)) == []


def _job(manifest):
    return manifest["spec"]["replicatedJobs"][0]["template"]["spec"]


@pytest.mark.parametrize(
    "spoil,expected",
    [
        # A misspelled field the API server would drop without a word.
        (lambda m: _job(m)["podFailurePolicy"]["rules"][0].update(onExitCode={}),
         "'onExitCode' was unexpected"),
        (lambda m: m["spec"]["failurePolicy"]["rules"][1].update(onJobFailureReason=[]),
         "'onJobFailureReason' was unexpected"),
        (lambda m: m["spec"].update(network={**m["spec"]["network"], "dnsHostnames": True}),
         "'dnsHostnames' was unexpected"),
        # Values the CRD constrains itself.
        (lambda m: m["spec"]["failurePolicy"]["rules"][0].update(action="FailJobs"),
         "'FailJobs' is not one of"),
        (lambda m: _job(m).update(parallelism="4"), "'4' is not of type 'integer'"),
        (lambda m: m["spec"]["failurePolicy"]["rules"][0].pop("name"), "'name' is a required"),
    ],
)  # fmt: skip
def test_the_validation_catches_what_the_api_server_would_drop_or_refuse(jobset, spoil, expected):
    manifest = _render("gpu", "C4Spmd16BAdam32Replicas", [], {})
    spoilt = copy.deepcopy(manifest)
    spoil(spoilt)
    problems = k8s_schema.errors(jobset, spoilt)
    assert len(problems) == 1 and expected in problems[0], problems
