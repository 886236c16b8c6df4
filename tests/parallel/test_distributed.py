"""Joining a job from the environment: jax's cluster detection, driven by faked cluster env vars."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from absl import logging as absl_logging
from jax._src import clusters
from jax._src.clusters import cloud_tpu_cluster

from pax import paths
from pax.errors import UsageError
from pax.parallel import distributed
from tests.helpers import xla_flags

ROOT = str(paths.ROOT)
_CLUSTER_PREFIXES = ("SLURM_", "OMPI_", "TPU_", "MEGASCALE_", "KUBERNETES_", "JAX_COORDINATOR")


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch):
    """Whatever machine runs the tests, each test starts outside any cluster."""
    for name in list(os.environ):
        if name.startswith(_CLUSTER_PREFIXES):
            monkeypatch.delenv(name)
    monkeypatch.setattr(cloud_tpu_cluster, "running_in_cloud_tpu_vm", False)


def _slurm(monkeypatch, ntasks, procid=0, job_id=4242, nodes="node[001-004]"):
    for name, value in {
        "SLURM_JOB_ID": job_id,
        "SLURM_STEP_NODELIST": nodes,
        "SLURM_NTASKS": ntasks,
        "SLURM_PROCID": procid,
        "SLURM_LOCALID": 0,
    }.items():
        monkeypatch.setenv(name, str(value))


def test_single_host_joins_nothing():
    assert distributed.detect_cluster() is None
    assert distributed.join_args(None, 1, None) is None


def test_num_hosts_without_address_or_cluster_is_a_usage_error():
    with pytest.raises(UsageError, match=r"--num_hosts=2 needs --server_addr=HOST:PORT"):
        distributed.join_args(None, 2, None)
    with pytest.raises(UsageError, match=r"--host_idx=1 needs --server_addr"):
        distributed.join_args(None, 2, 1)


def test_slurm_step_is_joined_through_jax(monkeypatch):
    _slurm(monkeypatch, ntasks=4, procid=2)
    assert distributed.detect_cluster() == ("SlurmCluster", 4)
    assert distributed.join_args(None, 1, None) == ("SlurmCluster", {})
    assert distributed.join_args(None, 4, None) == ("SlurmCluster", {})
    # What jax then fills in by itself: first node of the step, a port derived from the job id
    # (the Slurm script in pax/launch/templates uses the same rule), Slurm's task rank.
    coordinator, count, rank, _ = clusters.ClusterEnv.auto_detect_unset_distributed_params(
        None, None, None, None, None, 300
    )
    assert (coordinator, count, rank) == (f"node001:{4242 % 4096 + 61440}", 4, 2)


def test_slurm_single_task_joins_nothing(monkeypatch):
    # jax would pin a lone task to one GPU; a one-task job keeps all of its devices instead.
    _slurm(monkeypatch, ntasks=1)
    assert distributed.detect_cluster() == ("SlurmCluster", 1)
    assert distributed.join_args(None, 1, None) is None


def test_num_hosts_disagreeing_with_the_cluster_is_a_usage_error(monkeypatch):
    _slurm(monkeypatch, ntasks=4)
    with pytest.raises(UsageError, match=r"--num_hosts=8, but SlurmCluster runs 4 processes"):
        distributed.join_args(None, 8, None)


def test_gke_tpu_slice_is_joined_through_jax(monkeypatch):
    # What GKE puts into each pod of a multi-host TPU slice (here v4-64: 8 hosts).
    monkeypatch.setattr(cloud_tpu_cluster, "running_in_cloud_tpu_vm", True)
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", ",".join(f"pax-workers-0-{i}.pax" for i in range(8)))
    monkeypatch.setenv("TPU_WORKER_ID", "5")
    monkeypatch.setenv("TPU_SKIP_MDS_QUERY", "true")  # GKE's: no TPU-VM metadata (GceTpuCluster)
    monkeypatch.setenv("MEGASCALE_NUM_SLICES", "1")  # else jax asks the metadata server
    monkeypatch.setenv("MEGASCALE_SLICE_ID", "0")
    assert distributed.detect_cluster() == ("GkeTpuCluster", 8)
    assert cloud_tpu_cluster.GkeTpuCluster.get_process_id() == 5
    assert distributed.join_args(None, 1, None) == ("GkeTpuCluster", {})


def test_open_mpi_is_joined_through_jax(monkeypatch):
    monkeypatch.setenv("OMPI_MCA_orte_hnp_uri", "1531576320.0;tcp://10.0.0.1:34911")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert distributed.detect_cluster() == ("OmpiCluster", 2)


def test_flags_win_over_the_cluster_and_switch_detection_off(monkeypatch):
    # Slurm with one task per node: jax's detection would hide all GPUs but SLURM_LOCALID's.
    _slurm(monkeypatch, ntasks=2, procid=1)
    assert distributed.join_args("node001:8482", 2, 1) == (
        "flags",
        dict(
            coordinator_address="node001:8482",
            num_processes=2,
            process_id=1,
            cluster_detection_method="deactivate",
        ),
    )
    with pytest.raises(UsageError, match=r"--host_idx=2 is outside 0..1"):
        distributed.join_args("node001:8482", 2, 2)
    with pytest.raises(UsageError, match=r"--server_addr needs --host_idx"):
        distributed.join_args("node001:8482", 2, None)


_PROBE = """
from pax.parallel import distributed
distributed.initialize(None, 1, None)
import jax
from jax.experimental import multihost_utils
import json, sys
ranks = multihost_utils.process_allgather(jax.numpy.array(jax.process_index()))
joined = [jax.process_index(), jax.process_count(), jax.device_count(), ranks.tolist()]
with open(sys.argv[1], "w") as f:
    json.dump(joined, f)
"""


def test_two_slurm_tasks_join_without_flags(tmp_path):
    """Real jax.distributed over gloo, coordinator and ranks from Slurm's variables alone."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {k: v for k, v in os.environ.items() if not k.startswith(_CLUSTER_PREFIXES)}
    base.update(
        PYTHONPATH=ROOT,
        JAX_PLATFORMS="cpu",
        JAX_COORDINATOR_PORT=str(port),
        XLA_FLAGS=xla_flags(2),
        SLURM_JOB_ID="77",
        SLURM_STEP_NODELIST="localhost",
        SLURM_NTASKS="2",
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PROBE, str(tmp_path / f"joined{i}.json")],
            cwd=ROOT,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**base, "SLURM_PROCID": str(i), "SLURM_LOCALID": str(i)},
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    # Each task writes what it joined to a file: gloo's own log lines share stdout and once cut
    # into the middle of a printed line.
    joined = [json.loads((tmp_path / f"joined{i}.json").read_text()) for i in range(2)]
    assert joined == [[0, 2, 4, [0, 1]], [1, 2, 4, [0, 1]]]


def _tpu_host_without_metadata(monkeypatch, hostnames: str | None):
    """A TPU host (or GKE pod) whose metadata server is not there: jax's own metadata lookup is
    pointed at the discard port of this host, where nothing listens (and which a host without
    loopback networking cannot reach either). hostnames: TPU_WORKER_HOSTNAMES (a GKE pod's;
    None: a TPU VM's, whose workers jax asks the metadata server for)."""
    closed = "127.0.0.1:9"
    monkeypatch.setattr(cloud_tpu_cluster, "running_in_cloud_tpu_vm", True)
    monkeypatch.setenv("GCE_METADATA_IP", closed)
    if hostnames is not None:
        monkeypatch.setenv("TPU_WORKER_HOSTNAMES", hostnames)
        monkeypatch.setenv("TPU_WORKER_ID", "0")
        monkeypatch.setenv("TPU_SKIP_MDS_QUERY", "true")


@pytest.fixture
def metadata_asked(monkeypatch):
    """The metadata keys jax asks for; each request fails as an unreachable server does."""
    asked = []

    def unreachable(key):
        asked.append(key)
        raise ConnectionError(
            "HTTPConnectionPool(host='metadata.google.internal', port=80): Max retries exceeded "
            f"with url: /computeMetadata/v1/instance/attributes/{key} (Caused by "
            "NewConnectionError: Failed to establish a new connection: [Errno 111] refused)"
        )

    monkeypatch.setattr(cloud_tpu_cluster, "get_metadata", unreachable)
    return asked


@pytest.mark.parametrize(
    "var,hosts",
    [
        ("TPU_WORKER_HOSTNAMES", "localhost"),
        ("TPU_WORKER_HOSTNAMES", ""),
        ("TPU_PROCESS_ADDRESSES", "10.0.0.2:8476"),
    ],
    ids=["one-host", "no-host", "one-process-address"],
)
def test_a_tpu_host_that_names_itself_alone_asks_no_metadata_server(
    monkeypatch, caplog, metadata_asked, var, hosts
):
    monkeypatch.setattr(cloud_tpu_cluster, "running_in_cloud_tpu_vm", True)
    monkeypatch.setenv(var, hosts)
    monkeypatch.setenv("TPU_WORKER_ID", "0")
    start = time.monotonic()
    with caplog.at_level("WARNING"):
        assert distributed.join_args(None, 1, None) is None
    assert time.monotonic() - start < 1.0  # no deadline waited for
    assert metadata_asked == [] and caplog.records == []


def test_a_tpu_host_of_several_slices_is_still_detected(monkeypatch, metadata_asked):
    # One host per slice, two slices (Megascale): jax's GKE candidate counts two processes.
    _tpu_host_without_metadata(monkeypatch, "localhost")
    monkeypatch.setenv("MEGASCALE_NUM_SLICES", "2")
    monkeypatch.setenv("MEGASCALE_SLICE_ID", "0")
    assert distributed.detect_cluster() == ("GkeTpuCluster", 2)


def test_a_tpu_vm_whose_metadata_server_is_not_there_runs_alone_with_one_short_warning(
    monkeypatch, caplog, metadata_asked
):
    """No worker variables: a TPU VM's workers come from its metadata server, which is asked."""
    _tpu_host_without_metadata(monkeypatch, None)
    with caplog.at_level("WARNING"):
        assert distributed.join_args(None, 1, None) is None
    assert metadata_asked == ["agent-worker-number"]
    (record,) = caplog.records
    assert record.getMessage().startswith("no cluster detected (GceTpuCluster: ConnectionError")
    assert record.getMessage().endswith("; running on this host alone")
    # The line as pax.main prints it (absl's prefix: level, time, thread id, file:line).
    record.thread = 2**64 - 1  # the widest thread id absl prints
    line = absl_logging.PythonFormatter().format(record)
    assert len(line) < 160, line


@pytest.mark.accelerator
def test_a_tpu_vm_without_metadata_runs_alone(monkeypatch, caplog):
    _tpu_host_without_metadata(monkeypatch, None)
    # jax itself fails here: it asks the metadata server (with `requests`, which the tpu lock
    # has and the cpu lock does not: either way, an exception).
    with pytest.raises(Exception):
        cloud_tpu_cluster.GceTpuCluster.is_env_present()
    with pytest.raises(distributed.DetectionFailed, match=r"^GceTpuCluster: \w+Error: "):
        distributed.detect_cluster()
    with caplog.at_level("WARNING"):
        assert distributed.join_args(None, 1, None) is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("no cluster detected (GceTpuCluster: ")


@pytest.mark.accelerator
def test_several_tpu_hosts_without_metadata_is_a_usage_error_naming_what_to_set(monkeypatch):
    _tpu_host_without_metadata(monkeypatch, "w-0,w-1,w-2,w-3")
    with pytest.raises(UsageError) as err:
        distributed.join_args(None, 1, None)
    message = str(err.value)
    assert "TPU_WORKER_HOSTNAMES lists 4 hosts" in message
    assert "MEGASCALE_NUM_SLICES=1" in message and "--server_addr=HOST:PORT" in message
    assert "\n" not in message
    # With the slice count given, jax needs no metadata and the slice is joined.
    monkeypatch.setenv("MEGASCALE_NUM_SLICES", "1")
    assert distributed.join_args(None, 1, None) == ("GkeTpuCluster", {})


@pytest.mark.accelerator
def test_num_hosts_on_an_undetectable_host_is_a_usage_error(monkeypatch):
    _tpu_host_without_metadata(monkeypatch, None)
    with pytest.raises(UsageError, match=r"could not complete .* and --num_hosts=2: set"):
        distributed.join_args(None, 2, None)


@pytest.mark.accelerator
def test_a_detection_that_hangs_is_given_up_after_the_timeout(monkeypatch):
    import threading

    release = threading.Event()

    class Hanging(clusters.ClusterEnv):
        opt_in_only_method = False

        @classmethod
        def is_env_present(cls):
            release.wait(30)  # a metadata request that never answers
            return True

    monkeypatch.setattr(clusters.ClusterEnv, "_cluster_types", [Hanging])
    start = time.monotonic()
    with pytest.raises(distributed.DetectionFailed, match=r"Hanging did not answer within 0.5 s"):
        distributed.detect_cluster(timeout_s=0.5)
    assert time.monotonic() - start < 5
    release.set()
