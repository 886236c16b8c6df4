"""pax.launch: JobSet manifests and the Slurm script for the reference experiments.

Validation is structural: there is no kubectl, cluster or JobSet CRD schema here, so each
manifest is parsed as YAML and checked field by field against what JobSet v1alpha2, the Job
controller and GKE act on; the Slurm script is checked by `bash -n`, its #SBATCH lines read,
and it is run with stand-ins for srun, scontrol and each container runtime.
"""

import json
import math
import os
import re
import signal
import stat
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml
from jax._src.clusters.slurm_cluster import SlurmCluster

from pax.errors import UsageError
from pax.experiments import registry
from pax.launch import cli as launch_cli
from pax.launch import render as cluster
from pax.launch import xla_flags
from pax.paths import ROOT

RELEASE = "1.4.0"
REGISTRY = "registry.example:5000/ml"
# experiment -> (TPU slice, hosts on it; GPUs per host, GPU hosts). Pax ran these on TPU v4:
# a v4-N slice has N/2 chips, 4 per host (v4-64 = 32 chips = 8 hosts).
REFERENCE = {
    "LmCloudSpmd2BLimitSteps": ("v4-8", 1, 4, 1),
    "C4Spmd1BAdam4Replicas": ("v4-8", 1, 4, 1),
    "C4Spmd16BAdam32Replicas": ("v4-64", 8, 8, 4),
    "C4SpmdPipelineGpt3SmallAdam64Replicas": ("v4-128", 16, 8, 8),
}


def _devices(exp):
    cls = registry.get(exp)
    return math.prod(cls.ICI_MESH_SHAPE) * math.prod(cls.DCN_MESH_SHAPE or ())


def _jobset(text):
    docs = list(yaml.safe_load_all(text))
    assert len(docs) == 1
    js = docs[0]
    assert js["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and js["kind"] == "JobSet"
    assert js["spec"]["network"]["enableDNSHostnames"] is True
    [rjob] = js["spec"]["replicatedJobs"]
    assert rjob["replicas"] == 1
    job = rjob["template"]["spec"]
    # One pod per host, each with its own completion index; a failed pod fails the whole
    # JobSet, which restarts every host together (jax.distributed cannot take a lone newcomer).
    assert job["parallelism"] == job["completions"]
    assert job["completionMode"] == "Indexed" and job["backoffLimit"] == 0
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    [container] = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    }
    args = container["args"]
    assert args[0] == f"--exp={registry.name_of(registry.get(args[0].split('=')[1]))}"
    job_dir = args[1].removeprefix("--job_log_dir=")
    assert job_dir.startswith(mounts["runs"] + "/") and claims["runs"] == "pax-runs"
    return js, rjob, job, pod, container


def _job_failure(job, container, exit_code, conditions=()):
    """(reason, message) of the Job when a pod fails: the Job controller's podFailurePolicy
    evaluation (kubernetes pkg/controller/job/pod_failure_policy.go, matchPodFailurePolicy:
    rules in order, exit code 0 never matches, onPodConditions status defaulting to True;
    FailJob's messages as it formats them) with backoffLimit counting unmatched failures."""
    for index, rule in enumerate(job.get("podFailurePolicy", {}).get("rules", [])):
        codes = rule.get("onExitCodes")
        if codes and codes.get("containerName", container) == container and exit_code != 0:
            if (exit_code in codes["values"]) == (codes["operator"] == "In"):
                assert rule["action"] == "FailJob"
                return "PodFailurePolicy", (
                    f"Container {container} for pod default/pod-0 failed with exit code "
                    f"{exit_code} matching FailJob rule at index {index}"
                )
        for pattern in rule.get("onPodConditions", []):
            if (pattern["type"], pattern.get("status", "True")) in conditions:
                assert rule["action"] == "FailJob"
                return "PodFailurePolicy", (
                    f"Pod default/pod-0 has condition {pattern['type']} matching FailJob rule "
                    f"at index {index}"
                )
    assert job["backoffLimit"] == 0
    return "BackoffLimitExceeded", "Job has reached the specified backoff limit"


def _jobset_action(js, reason, message):
    """The JobSet controller's choice (jobset pkg/controllers/failure_policy.go,
    ruleIsApplicable: the first rule whose reasons and message patterns match; RestartJobSet,
    counted against maxRestarts, when none does)."""
    for rule in js["spec"]["failurePolicy"].get("rules", []):
        reasons = rule.get("onJobFailureReasons", [])
        patterns = rule.get("onJobFailureMessagePatterns", [])
        if (not reasons or reason in reasons) and (
            not patterns or any(re.search(p, message) for p in patterns)
        ):
            return rule["action"]
    return "RestartJobSet"


@pytest.mark.parametrize("target", ["tpu", "gpu"])
@pytest.mark.parametrize(
    "exit_code,conditions,action",
    [
        (2, (), "FailJobSet"),  # bad input: the same on every restart
        (75, (), "RestartJobSetAndIgnoreMaxRestarts"),  # preempted after saving
        (137, (("DisruptionTarget", "True"),), "RestartJobSetAndIgnoreMaxRestarts"),  # evicted
        (75, (("DisruptionTarget", "True"),), "RestartJobSetAndIgnoreMaxRestarts"),
        (1, (), "RestartJobSet"),  # a real failure: counted against maxRestarts
        (25, (), "RestartJobSet"),
        (139, (("DisruptionTarget", "False"),), "RestartJobSet"),
    ],
)
def test_failure_policies_fit_pax_exit_codes(target, exit_code, conditions, action):
    js, _, job, _, container = _jobset(
        cluster.render(RELEASE, target, "C4Spmd16BAdam32Replicas", registry=REGISTRY)
    )
    reason, message = _job_failure(job, container["name"], exit_code, conditions)
    assert _jobset_action(js, reason, message) == action
    assert js["spec"]["failurePolicy"]["maxRestarts"] == 3


def test_longest_name_the_webhook_takes_is_accepted():
    # 4 hosts: "<45 characters>-workers-0-3" + "-abcde" is 63 characters.
    js, *_ = _jobset(cluster.render(RELEASE, "gpu", "C4Spmd16BAdam32Replicas", name="a" * 45))
    assert js["metadata"]["name"] == "a" * 45


@pytest.mark.parametrize("exp", REFERENCE)
def test_tpu_jobset_fills_the_slice_the_mesh_needs(exp):
    slice_name, hosts, _, _ = REFERENCE[exp]
    js, _, job, pod, container = _jobset(
        cluster.render(RELEASE, "tpu", exp, ["NUM_TRAIN_STEPS=100"], registry=REGISTRY)
    )
    assert job["parallelism"] == hosts
    chips_per_host = container["resources"]["limits"]["google.com/tpu"]
    assert hosts * chips_per_host == _devices(exp) == int(slice_name.split("-")[1]) // 2
    selector = pod["nodeSelector"]
    assert selector["cloud.google.com/gke-tpu-accelerator"] == "tpu-v4-podslice"
    topology = selector["cloud.google.com/gke-tpu-topology"]
    assert math.prod(map(int, topology.split("x"))) == _devices(exp)
    assert container["image"] == f"{REGISTRY}/pax:{RELEASE}-tpu"
    assert (
        js["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"]
        == "cloud.google.com/gke-nodepool"
    )
    # GKE's TPU env (TPU_WORKER_HOSTNAMES/ID) is the coordinator setting; no flags for it.
    assert container["args"][2:] == ["--set=NUM_TRAIN_STEPS=100"]


@pytest.mark.parametrize("exp", REFERENCE)
def test_gpu_jobset_points_every_pod_at_pod_zero(exp):
    _, _, gpus, hosts = REFERENCE[exp]
    js, rjob, job, _, container = _jobset(
        cluster.render(
            RELEASE,
            "gpu",
            exp,
            ["ICI_MESH_SHAPE=[1,4,1]"] if gpus == 4 else [],
            gpus_per_host=gpus,
            registry=REGISTRY,
        )
    )
    assert job["parallelism"] == hosts
    assert hosts * container["resources"]["limits"]["nvidia.com/gpu"] == _devices(exp)
    assert container["image"] == f"{REGISTRY}/pax:{RELEASE}-gpu"
    flags = dict(a.split("=", 1) for a in container["args"])
    # JobSet names pod 0 <jobset>-<replicated job>-0-0 under the subdomain <jobset>.
    name = js["metadata"]["name"]
    subdomain = js["spec"]["network"].get("subdomain", name)
    host, port = flags["--server_addr"].rsplit(":", 1)
    assert host == f"{name}-{rjob['name']}-0-0.{subdomain}" and 0 < int(port) < 65536
    assert flags["--num_hosts"] == str(hosts)
    # The index comes from the Job controller's completion-index annotation, expanded by the
    # kubelet from an env var of the container.
    assert flags["--host_idx"] == "$(PAX_HOST_IDX)"
    [env] = [e for e in container["env"] if e["name"] == "PAX_HOST_IDX"]
    assert (
        env["valueFrom"]["fieldRef"]["fieldPath"]
        == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )


def test_data_parallel_experiment_takes_the_size_it_is_given():
    exp = "LmCloudTransformerAdamLimitSteps"  # no mesh: pmap over every device
    _, _, job, pod, _ = _jobset(cluster.render(RELEASE, "tpu", exp, tpu="v4-32"))
    assert job["parallelism"] == 4
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x2x4"
    _, _, job, _, _ = _jobset(cluster.render(RELEASE, "gpu", exp, hosts=2))
    assert job["parallelism"] == 2
    with pytest.raises(UsageError, match="choose the slice"):
        cluster.render(RELEASE, "tpu", exp)


def test_overrides_reach_the_manifest_verbatim():
    text = cluster.render(
        RELEASE, "gpu", "C4Spmd16BAdam32Replicas", ["ICI_MESH_SHAPE=[1,8,4]", "LEARNING_RATE=1e-4"]
    )
    *_, container = _jobset(text)
    assert container["args"][-2:] == ["--set=ICI_MESH_SHAPE=[1,8,4]", "--set=LEARNING_RATE=1e-4"]


@pytest.mark.parametrize(
    "slice_name,accelerator,chips,topology",
    [
        ("v4-8", "tpu-v4-podslice", 4, "2x2x1"),
        ("v4-16", "tpu-v4-podslice", 8, "2x2x2"),
        ("v4-64", "tpu-v4-podslice", 32, "2x4x4"),
        ("v4-128", "tpu-v4-podslice", 64, "4x4x4"),
        ("v4-512", "tpu-v4-podslice", 256, "4x8x8"),
        ("v5p-32", "tpu-v5p-slice", 16, "2x2x4"),
        ("v5litepod-16", "tpu-v5-lite-podslice", 16, "4x4"),
        ("v6e-256", "tpu-v6e-slice", 256, "16x16"),
    ],
)
def test_tpu_slices_as_cloud_tpu_names_them(slice_name, accelerator, chips, topology):
    found = cluster.tpu_slice(slice_name)
    assert (found.name, found.generation.gke, found.chips, found.topology) == (
        slice_name,
        accelerator,
        chips,
        topology,
    )


@pytest.mark.parametrize("slice_name", ["v3-8", "v4-4", "v4-48", "v4", "tpu-64", "v5litepod-1"])
def test_tpu_slices_it_cannot_place(slice_name):
    with pytest.raises(UsageError, match=r"TPU slice|names no size"):
        cluster.tpu_slice(slice_name)


def _sbatch_directives(text):
    lines = [ln.removeprefix("#SBATCH ") for ln in text.splitlines() if ln.startswith("#SBATCH ")]
    return dict(ln.lstrip("-").partition("=")[::2] for ln in lines)


@pytest.mark.parametrize("exp", REFERENCE)
def test_slurm_script_parses_and_asks_for_one_task_per_node(exp, tmp_path):
    _, _, gpus, hosts = REFERENCE[exp]
    text = cluster.render(
        RELEASE,
        "slurm",
        exp,
        gpus_per_host=gpus,
        sets=["ICI_MESH_SHAPE=[1,4,1]"] if gpus == 4 else [],
    )
    script = tmp_path / "run.sbatch"
    script.write_text(text)
    subprocess.run(["bash", "-n", str(script)], check=True)
    directives = _sbatch_directives(text)
    assert directives["nodes"] == str(hosts) and directives["ntasks-per-node"] == "1"
    assert int(directives["gpus-per-node"]) * hosts == _devices(exp)
    assert directives["job-name"] == f"pax-{exp.lower()}" and directives["exclusive"] == ""
    # sbatch reads #SBATCH lines only before the first command.
    first_command = next(
        i for i, ln in enumerate(text.splitlines()) if ln.strip() and not ln.startswith("#")
    )
    last_directive = max(i for i, ln in enumerate(text.splitlines()) if ln.startswith("#SBATCH"))
    assert last_directive < first_command


_RECORD = """#!{python}
import json, os, sys
with open(os.path.join(os.environ['LOG'], 'task%s.json' % os.environ['SLURM_PROCID']), 'w') as f:
  json.dump([os.path.basename(sys.argv[0])] + sys.argv[1:], f)
with open(os.path.join(os.environ['LOG'], 'task%s.path' % os.environ['SLURM_PROCID']), 'w') as f:
  f.write(os.environ.get('PYTHONPATH', ''))
with open(os.path.join(os.environ['LOG'], 'task%s.xla' % os.environ['SLURM_PROCID']), 'w') as f:
  f.write(os.environ['XLA_FLAGS'])
"""
_NVIDIA_SMI = """#!/bin/bash
echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'
"""
_SRUN = """#!/bin/bash
# srun's stand-in: keep its options, run the command once per node as Slurm would.
opts=()
while [[ $1 == -* ]]; do opts+=("$1"); shift; done
printf '%s\\n' "${opts[@]}" > "$LOG/srun.opts"
for ((i = 0; i < SLURM_NNODES; i++)); do SLURM_PROCID=$i "$@" || exit; done
"""
_SCONTROL = """#!/bin/bash
[[ "$1 $2 $3" == "show hostnames node[001-004]" ]] && printf 'node00%s\\n' 1 2 3 4
"""


def _stubs(tmp_path, gpus=True):
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    log.mkdir()
    record = _RECORD.format(python=sys.executable)
    stubs = [(bin_dir / "srun", _SRUN), (bin_dir / "scontrol", _SCONTROL)] + [
        (path, record)
        for path in (
            bin_dir / "docker",
            bin_dir / "apptainer",
            bin_dir / "python",
            tmp_path / "venv" / "bin" / "python",
        )
    ]
    if gpus:  # what the docker runtime asks before passing --gpus all
        stubs.append((bin_dir / "nvidia-smi", _NVIDIA_SMI))
    for path, text in stubs:
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bin_dir, log


def _job_env(tmp_path, bin_dir, log, **more):
    """The variables of a 4-node Slurm job whose commands are the stubs, logging into LOG."""
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "LOG": str(log),
        "SLURM_JOB_ID": "1",
        "SLURM_NNODES": "4",
        "SLURM_JOB_NODELIST": "node[001-004]",
        **more,
    }


@pytest.mark.parametrize("runtime", ["pyxis", "docker", "docker-cpu", "apptainer", "venv"])
def test_slurm_script_starts_one_pax_process_per_node(runtime, tmp_path):
    script = tmp_path / "run.sbatch"
    assert (
        launch_cli.main(
            [
                RELEASE,
                "slurm",
                "--exp=C4Spmd16BAdam32Replicas",
                f"--registry={REGISTRY}",
                "--set",
                "ICI_MESH_SHAPE=[1,8,4]",
                "-o",
                str(script),
            ]
        )
        == 0
    )
    bin_dir, log = _stubs(tmp_path, gpus=runtime != "docker-cpu")
    env = _job_env(
        tmp_path,
        bin_dir,
        log,
        SLURM_JOB_ID="4242",
        SLURM_SUBMIT_DIR=str(ROOT),  # sbatch's, for the venv runtime's checkout
        PAX_RUNTIME=runtime.removesuffix("-cpu"),
        PAX_VENV=str(tmp_path / "venv"),
    )
    result = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    job_dir = f"{tmp_path}/pax-runs/pax-c4spmd16badam32replicas"
    assert os.path.isdir(job_dir)
    # jax's Slurm detection would pick the same coordinator: first node, port from the job id.
    os.environ.update(SLURM_JOB_ID="4242", SLURM_STEP_NODELIST="node[001-004]")
    try:
        coordinator = SlurmCluster.get_coordinator_address(None, None)
    finally:
        del os.environ["SLURM_JOB_ID"], os.environ["SLURM_STEP_NODELIST"]
    image = f"{REGISTRY}/pax:{RELEASE}-gpu"
    head = {
        "pyxis": ["python", "-m", "pax.main"],
        "docker": [
            "docker",
            "run",
            "--rm",
            "--gpus",
            "all",
            "--network",
            "host",
            "--ipc",
            "host",
            "--user",
            f"{os.getuid()}:{os.getgid()}",
            "-e",
            "JAX_PLATFORMS",
            "-e",
            "XLA_FLAGS",
            "-v",
            f"{job_dir}:{job_dir}",
            image,
        ],
        "apptainer": ["apptainer", "run", "--nv", "--bind", job_dir, f"docker://{image}"],
        "venv": ["python", "-m", "pax.main"],
    }
    # Without NVIDIA GPUs on the node the image runs on its CPU fallback: no --gpus.
    head["docker-cpu"] = [a for a in head["docker"] if a not in ("--gpus", "all")]
    head = head[runtime]
    for i in range(4):
        argv = json.loads((log / f"task{i}.json").read_text())
        assert argv == head + [
            "--exp=tasks.lm.params.c4.C4Spmd16BAdam32Replicas",
            f"--job_log_dir={job_dir}",
            f"--server_addr={coordinator}",
            "--num_hosts=4",
            "--set=ICI_MESH_SHAPE=[1,8,4]",
            f"--host_idx={i}",
        ]
    if runtime == "venv":  # the release env has no pax: every task imports the checkout's
        assert {(log / f"task{i}.path").read_text() for i in range(4)} == {str(ROOT)}
    assert {(log / f"task{i}.xla").read_text() for i in range(4)} == {xla_flags.value()}
    opts = (log / "srun.opts").read_text().split()
    assert "--ntasks-per-node=1" in opts
    if runtime == "pyxis":
        assert f"--container-image=registry.example:5000#ml/pax:{RELEASE}-gpu" in opts
        assert f"--container-mounts={job_dir}:{job_dir}" in opts


def test_slurm_jobs_own_xla_flags_follow_the_images_so_theirs_win(tmp_path):
    script = tmp_path / "run.sbatch"
    script.write_text(cluster.render(RELEASE, "slurm", "LmCloudSpmdTiny"))
    bin_dir, log = _stubs(tmp_path)
    mine = "--xla_gpu_enable_triton_gemm=true"
    env = _job_env(tmp_path, bin_dir, log, PAX_RUNTIME="venv", XLA_FLAGS=mine, SLURM_NNODES="1")
    env["PAX_VENV"] = str(tmp_path / "venv")
    result = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    # XLA takes a flag's last value: the job's Triton choice stands.
    assert (log / "task0.xla").read_text() == f"{xla_flags.value()} {mine}"


def test_slurm_script_refuses_an_unknown_runtime(tmp_path):
    script = tmp_path / "run.sbatch"
    script.write_text(cluster.render(RELEASE, "slurm", "C4Spmd16BAdam32Replicas"))
    bin_dir, log = _stubs(tmp_path)
    result = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_job_env(tmp_path, bin_dir, log, PAX_RUNTIME="podman"),
    )
    assert result.returncode == 2
    assert "PAX_RUNTIME=podman is not one of pyxis, docker, apptainer, venv" in result.stderr
    assert not list(log.iterdir())


@pytest.mark.parametrize(
    "venv,checkout,message",
    [
        ("", ".", "PAX_RUNTIME=venv needs PAX_VENV=the release env"),
        ("venv", "elsewhere", "PAX_RUNTIME=venv runs pax from a checkout: "),
    ],
)
def test_slurm_venv_runtime_names_what_is_missing(venv, checkout, message, tmp_path):
    script = tmp_path / "run.sbatch"
    script.write_text(cluster.render(RELEASE, "slurm", "C4Spmd16BAdam32Replicas"))
    bin_dir, log = _stubs(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    result = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=_job_env(
            tmp_path,
            bin_dir,
            log,
            SLURM_SUBMIT_DIR=str(tmp_path / checkout),
            PAX_RUNTIME="venv",
            PAX_VENV=str(tmp_path / venv) if venv else "",
        ),
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not list(log.iterdir())


_SRUN_PREEMPTED = """#!/bin/bash
# srun's stand-in for a step that saves on SIGTERM: exits 75 once told to stop.
trap 'echo got-term >> "$LOG/srun.signals"; exit 75' TERM
touch "$LOG/srun.started"
sleep 60 & wait
"""


def test_slurm_script_passes_sigterm_on_to_the_tasks_and_exits_with_their_status(tmp_path):
    # scancel --batch/--full and preemption signal the batch script too: it must not end
    # before the tasks have saved, and the job's exit code must be theirs (75).
    script = tmp_path / "run.sbatch"
    script.write_text(cluster.render(RELEASE, "slurm", "C4Spmd16BAdam32Replicas"))
    bin_dir, log = _stubs(tmp_path)
    (bin_dir / "srun").write_text(_SRUN_PREEMPTED)
    proc = subprocess.Popen(
        ["bash", str(script)],
        env=_job_env(tmp_path, bin_dir, log),
    )
    for _ in range(600):
        if (log / "srun.started").exists():
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 75
    assert (log / "srun.signals").read_text() == "got-term\n"


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["gpu", "--exp=C4Spmd16BAdam32Replicas", "--hosts=2"],
            "C4Spmd16BAdam32Replicas's mesh needs 32 GPUs, not 2 hosts x 8: use --hosts=4",
        ),
        (
            ["tpu", "--exp=C4Spmd16BAdam32Replicas", "--tpu=v4-128"],
            "mesh needs 32 chips but v4-128 has 64: use --tpu=v4-64",
        ),
        (
            ["tpu", "--exp=C4Spmd16BAdam32Replicas", "--hosts=16"],
            "--hosts=16 disagrees with --tpu=v4-64: 8 hosts of 4 chips",
        ),
        (
            ["gpu", "--exp=C4Spmd1BAdam4Replicas"],
            "mesh needs 4 GPUs, not a whole number of hosts x 8",
        ),
        (["tpu", "--exp=NoSuchExperiment"], "NoSuchExperiment"),
        (["gpu", "--exp=C4Spmd16BAdam32Replicas", "--name=Big_Run"], "bad --name 'Big_Run'"),
        # The webhook's rules: Job and pod names are DNS-1035 labels (a letter first) ...
        (["gpu", "--exp=C4Spmd16BAdam32Replicas", "--name=16b-run"], "e.g. --name=pax-16b-run"),
        (["tpu", "--exp=C4Spmd16BAdam32Replicas", "--name=16b-run"], "a DNS-1035 label"),
        # ... and the longest pod name plus the Job controller's 6-character suffix fits in 63:
        # 4 hosts make "<name>-workers-0-3-xxxxx", so 46 characters are too many.
        (
            ["gpu", "--exp=C4Spmd16BAdam32Replicas", "--name=" + "a" * 46],
            "(64 characters), over the 63 the JobSet webhook allows; use at most 45 characters",
        ),
        (
            ["gpu", "--exp=C4Spmd16BAdam32Replicas", "--name=" + "a" * 51],
            "use at most 45 characters",
        ),
        (
            ["gpu", "--exp=C4Spmd16BAdam32Replicas", "--job-log-dir=/tmp/x"],
            "--job-log-dir must lie under /runs/",
        ),
        (
            ["gpu", "--exp=C4Spmd16BAdam32Replicas", "--set", "NUM_LAYRES=2"],
            "unknown hyper-parameter",
        ),
    ],
)
def test_bad_requests_exit_2_with_one_line_and_write_nothing(args, message, tmp_path, capsys):
    out = tmp_path / "manifest.yaml"
    assert launch_cli.main([RELEASE, *args, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pax cluster: error: ") and err.count("\n") == 1 and message in err
    assert not out.exists()


def test_unknown_release_is_named_with_the_known_ones(capsys):
    assert launch_cli.main(["9.9.9", "gpu", "--exp=C4Spmd16BAdam32Replicas"]) == 2
    assert "unknown release '9.9.9'; known releases: " in capsys.readouterr().err


def test_installed_package_takes_any_version(monkeypatch, tmp_path):
    # Installed (e.g. inside an image) there is no releases/ to check the version against.
    monkeypatch.setenv("PAX_RELEASES_DIR", str(tmp_path))  # a folder without releases
    *_, container = _jobset(cluster.render("v1.5.0", "gpu", "C4Spmd16BAdam32Replicas"))
    assert container["image"] == "pax:1.5.0-gpu"
    with pytest.raises(UsageError, match="bad release 'latest'"):
        cluster.render("latest", "gpu", "C4Spmd16BAdam32Replicas")


def test_renderer_runs_without_jax_and_ships_its_templates():
    code = (
        "import sys; from pax.launch import render as cluster; "
        'cluster.render("1.4.0", "slurm", "C4Spmd16BAdam32Replicas"); '
        'print(sorted(m for m in ("jax", "numpy", "yaml") if m in sys.modules))'
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ).stdout
    assert out.strip() == "[]"
    with open(ROOT / "pyproject.toml", "rb") as f:
        globs = tomllib.load(f)["tool"]["setuptools"]["package-data"]["pax.launch"]
    templates = {name for name, _ in cluster.TARGETS.values()}
    package = Path(cluster.__file__).parent
    assert templates == {p.name for g in globs for p in package.glob(g)}
