"""The Slurm script on a real two-node Slurm: preempted mid-run, resubmitted, same result.

`./noxw -s cluster -- 1.4.0 slurm` renders the script for the tiny experiment on a 2-host mesh;
it is submitted to the cluster ci/slurm.sh starts (one slurmctld, slurmd n1 and n2 on this
machine), with PAX_RUNTIME=venv (the release's pinned env and this checkout) and with
PAX_RUNTIME=docker (the TPU image on its CPU fallback). `scancel --signal=TERM` stops it mid-run:
the job must end with exit code 75 and one checkpoint at the step both processes agreed on; the
resubmitted script must resume there and end with the final loss of an uninterrupted run.

Runs with PAX_CONTAINER_TESTS=1 and SLURM_CONF naming a running cluster (.ci/run starts it);
the docker case needs this checkout's image on the release's lock, which
`./noxw -s build -- RELEASE tpu --dev` makes (PAX_CONTAINER_RELEASE, default the newest).
"""

import json
import os
import re
import subprocess
import time

import pytest

from pax.images import engine, target
from pax.paths import ROOT
from pax.releases import catalog
from tests.helpers import xla_flags

pytestmark = pytest.mark.skipif(
    os.environ.get("PAX_CONTAINER_TESTS") != "1",
    reason="Slurm tests need a cluster: set PAX_CONTAINER_TESTS=1 and SLURM_CONF "
    "(SLURM_CONF=$(ci/slurm.sh start))",
)

RELEASE = os.environ.get("PAX_CONTAINER_RELEASE") or catalog.newest().version
STEPS = 120
SETS = [
    "NUM_LAYERS=2",
    "MODEL_DIMS=64",
    "HIDDEN_DIMS=128",
    "SEQ_LEN=32",
    "PERCORE_BATCH_SIZE=4",
    "ICI_MESH_SHAPE=[1,2,1]",  # 2 devices: one per host, one host per Slurm node
    "SUMMARY_EVERY_N_STEPS=1",
    "EVAL_EVERY_N_STEPS=1000",
    "CHECKPOINT_EVERY_N_STEPS=1000",
    f"NUM_TRAIN_STEPS={STEPS}",
]
STEP_LINE = re.compile(r"step (\d+)/\d+ ")
PREEMPTED = re.compile(r"preempted: .* at step (\d+): checkpoint saved")
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


@pytest.fixture(scope="module")
def slurm():
    if not os.environ.get("SLURM_CONF"):
        pytest.fail("SLURM_CONF is not set: run `export SLURM_CONF=$(ci/slurm.sh start)`")
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True)
    if ping.returncode or "UP" not in ping.stdout:
        pytest.fail(f"no Slurm controller answers for {os.environ['SLURM_CONF']}: {ping.stdout}")


@pytest.fixture(scope="module")
def script(tmp_path_factory, slurm):
    """The batch script as a user gets it: rendered by the nox session."""
    out = tmp_path_factory.mktemp("script") / "tiny.sbatch"
    sets = [a for s in SETS for a in ("--set", s)]
    subprocess.run(
        [str(ROOT / "noxw"), "-s", "cluster", "--", RELEASE, "slurm", "--exp=LmCloudSpmdTiny"]
        + ["--gpus-per-host=1", "--name=pax-tiny", *sets, "-o", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return out


def _submit(script, job_dir, runtime):
    env = {
        **os.environ,
        "PAX_JOB_LOG_DIR": str(job_dir),
        "PAX_RUNTIME": runtime,
        "PAX_VENV": str(ROOT / ".venv" / f"pax-{RELEASE}-cpu"),
        "PAX_CHECKOUT": str(ROOT),
        "PAX_IMAGE": target.resolve(RELEASE, "tpu", dev=True).tag,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": xla_flags(1),
    }
    out = subprocess.run(
        ["sbatch", "--parsable", str(script)],
        cwd=job_dir.parent,  # where %x-%j.out lands
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip().split(";")[0]


def _job(job_id) -> dict:
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=True
    ).stdout
    return dict(f.split("=", 1) for f in out.split() if "=" in f)


def _output(job_dir, job_id) -> str:
    path = job_dir.parent / f"pax-tiny-{job_id}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def _wait(job_dir, job_id, preempt_after=None, timeout=900):
    """The job's exit code once it ends; with preempt_after, `scancel --signal=TERM` once its
    output shows that step."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = _job(job_id)
        if info["JobState"] in TERMINAL:
            return int(info["ExitCode"].split(":")[0])
        if preempt_after is not None:
            steps = [int(s) for s in STEP_LINE.findall(_output(job_dir, job_id))]
            if steps and steps[-1] >= preempt_after:
                subprocess.run(["scancel", "--signal=TERM", job_id], check=True)
                preempt_after = None
        time.sleep(0.5)
    subprocess.run(["scancel", job_id], check=False)
    pytest.fail(f"job {job_id} did not end within {timeout} s:\n{_output(job_dir, job_id)[-3000:]}")


def _train_losses(job_dir) -> dict:
    with open(job_dir / "metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    return {r["step"]: r["loss"] for r in rows if r["split"] == "train"}


@pytest.fixture(scope="module")
def docker_image():
    engine.require_engine()
    if not engine.image_exists(target.resolve(RELEASE, "tpu", dev=True).tag):
        pytest.fail(
            f"{target.resolve(RELEASE, 'tpu', dev=True).tag} missing: ./noxw -s build -- {RELEASE} tpu --dev"
        )


@pytest.mark.parametrize("runtime", ["venv", "docker"])
def test_preempted_job_resumes_and_ends_as_an_uninterrupted_one(runtime, script, tmp_path, request):
    if runtime == "docker":
        request.getfixturevalue("docker_image")
    reference, preempted = tmp_path / "reference", tmp_path / "preempted"
    job = _submit(script, reference, runtime)
    assert _wait(reference, job) == 0, _output(reference, job)[-3000:]
    expected = _train_losses(reference)
    assert max(expected) == STEPS

    job = _submit(script, preempted, runtime)
    assert _wait(preempted, job, preempt_after=5) == 75, _output(preempted, job)[-3000:]
    log = _output(preempted, job)
    # Both processes (their logs share the job's output) name the one step they saved.
    saved = {int(s) for s in PREEMPTED.findall(log)}
    assert len(PREEMPTED.findall(log)) == 2 and len(saved) == 1, log[-3000:]
    [step] = saved
    assert 5 <= step < STEPS
    assert os.listdir(preempted / "checkpoints") == [f"checkpoint_{step:08d}"]
    assert max(_train_losses(preempted)) == step

    job = _submit(script, preempted, runtime)
    assert _wait(preempted, job) == 0, _output(preempted, job)[-3000:]
    assert f"resumed from {preempted}/checkpoints/checkpoint_{step:08d}" in _output(preempted, job)
    resumed = _train_losses(preempted)
    assert max(resumed) == STEPS
    for s in range(1, STEPS + 1):
        assert resumed[s] == pytest.approx(expected[s], rel=1e-6), s
