"""Multi-process JAX: one process per host, joined through a coordinator.

Two ways in: Pax's multiprocess flags (--server_addr, --num_hosts, --host_idx), or, without
them, the cluster jax detects itself: TPU pod slices, Slurm steps and Open MPI (there jax gives
each process one GPU, so launch one task per GPU), Kubernetes Jobs where the `kubernetes`
package is installed (the images leave it out; their GPU JobSet passes the flags).
"""

import os
import threading
from typing import Optional

import jax
from absl import logging

# jax's own cluster detection has no public entry point short of initialize(), which fails where
# there is no cluster; its registry is read here and only here (tests pin the contract).
from jax._src import clusters
from jax._src.clusters import cloud_tpu_cluster

from pax.errors import UsageError

# How long jax's detection may take. A metadata server that answers does so in milliseconds; one
# that is unreachable (a container, a GKE pod without metadata access) can hold jax's requests
# for minutes of timeouts and retries.
DETECTION_TIMEOUT_S = 10.0
# Where a TPU host learns its slice's other workers (GKE and TPU VMs alike), in jax's order.
_TPU_WORKER_VARS = ("TPU_PROCESS_ADDRESSES", "TPU_WORKER_HOSTNAMES")
# The warning's reason is cut to this many characters: with absl's prefix (level, time, thread
# id, file:line: up to ~58), the line stays under 160 characters.
_REASON_WIDTH = 50


class DetectionFailed(Exception):
    """jax's cluster detection did not complete: why, in one line."""


def detect_cluster(timeout_s: float = DETECTION_TIMEOUT_S) -> Optional[tuple[str, int]]:
    """The cluster jax.distributed.initialize() would join on its own: (kind, process count).

    Same candidates in the same order as jax's auto-detection, opt-in ones (mpi4py) left out as
    jax does, and the TPU ones where the TPU worker variables name one host or none (a one-host
    TPU VM or pod: no metadata server is asked); None where there is none (a single-host run).
    Raises DetectionFailed where a candidate raises (a metadata server that is not there) or
    takes longer than timeout_s: it runs in a daemon thread, so a hung request is left behind,
    not waited for.
    """
    outcome: dict = {}
    skip_tpu = _one_tpu_host()

    def detect():
        try:
            for env in clusters.ClusterEnv._cluster_types:
                if skip_tpu and issubclass(env, cloud_tpu_cluster.BaseTpuCluster):
                    continue
                outcome["env"] = env.__name__
                if not env.opt_in_only_method and env.is_env_present():
                    outcome["found"] = (env.__name__, env.get_process_count())
                    return
            outcome["found"] = None
        except Exception as err:  # noqa: BLE001 - any failure of jax's probes means "unknown"
            outcome["error"] = err

    thread = threading.Thread(target=detect, name="pax-cluster-detection", daemon=True)
    thread.start()
    thread.join(timeout_s)
    where = outcome.get("env", "jax's cluster detection")
    if thread.is_alive():
        raise DetectionFailed(f"{where} did not answer within {timeout_s:g} s")
    if "error" in outcome:
        err = outcome["error"]
        reason = (str(err).strip().splitlines() or [""])[0][:200]
        raise DetectionFailed(f"{where}: {type(err).__name__}: {reason}")
    return outcome["found"]


def _one_tpu_host() -> bool:
    """Whether the TPU worker variables name this host alone (or no host) and no other slice is
    named: jax's TPU candidates could then only find a one-process job, and asking a metadata
    server for it is what takes time (seconds to a deadline where none answers)."""
    named = next((os.environ[var] for var in _TPU_WORKER_VARS if var in os.environ), None)
    if named is None:  # a TPU VM's workers come from its metadata server: ask it
        return False
    hosts = [h for h in named.split(",") if h.strip()]
    return len(hosts) <= 1 and os.environ.get("MEGASCALE_NUM_SLICES", "1").strip() in ("", "1")


def _hosts_named_by_environment() -> tuple[int, str]:
    """How many hosts the TPU worker variables list, and which variable said so (0, "")."""
    for var in _TPU_WORKER_VARS:
        hosts = [h for h in os.environ.get(var, "").split(",") if h.strip()]
        if hosts:
            return len(hosts), var
    return 0, ""


def _undetected(why: DetectionFailed, num_hosts: int) -> None:
    """A detection that could not complete: single host, unless something says otherwise."""
    hosts, var = _hosts_named_by_environment()
    if hosts > 1 or num_hosts > 1:
        said = f"{var} lists {hosts} hosts" if hosts > 1 else f"--num_hosts={num_hosts}"
        raise UsageError(
            f"cluster detection could not complete ({why}) and {said}: set "
            "MEGASCALE_NUM_SLICES=1 (or the slice count) and MEGASCALE_SLICE_ID where no metadata "
            "server answers, or pass --server_addr=HOST:PORT --num_hosts=N --host_idx=I"
        )
    reason = str(why) if len(str(why)) <= _REASON_WIDTH else str(why)[: _REASON_WIDTH - 1] + "…"
    logging.warning("no cluster detected (%s); running on this host alone", reason)


def join_args(
    server_addr: Optional[str], num_hosts: int, host_idx: Optional[int]
) -> Optional[tuple[str, dict]]:
    """How to join: (source, keyword arguments for jax.distributed.initialize), or None alone.

    Flags win, with jax's detection turned off: under Slurm or Open MPI it would otherwise pin
    each process to one GPU, while Pax runs one process per host over all of its devices.
    """
    if server_addr:
        if host_idx is None:
            raise UsageError("--server_addr needs --host_idx (this process's index)")
        if not 0 <= host_idx < num_hosts:
            raise UsageError(f"--host_idx={host_idx} is outside 0..{num_hosts - 1}")
        return "flags", dict(
            coordinator_address=server_addr,
            num_processes=num_hosts,
            process_id=host_idx,
            cluster_detection_method="deactivate",
        )
    if host_idx is not None:
        raise UsageError(f"--host_idx={host_idx} needs --server_addr=HOST:PORT (process 0)")
    try:
        found = detect_cluster()
    except DetectionFailed as why:
        _undetected(why, num_hosts)
        return None
    if found is None:
        if num_hosts > 1:
            raise UsageError(
                f"--num_hosts={num_hosts} needs --server_addr=HOST:PORT and --host_idx: "
                "jax detects no cluster here (TPU pod, Slurm, Open MPI, Kubernetes)"
            )
        return None
    kind, count = found
    if num_hosts > 1 and num_hosts != count:
        raise UsageError(
            f"--num_hosts={num_hosts}, but {kind} runs {count} processes; drop "
            "--num_hosts or change the job"
        )
    return (kind, {}) if count > 1 else None


def initialize(server_addr: Optional[str], num_hosts: int, host_idx: Optional[int]) -> None:
    """Joins the job's other processes, if there are any; before any other jax call.

    On CPU the collectives run over gloo, which is what multi-process tests on one machine use.
    """
    join = join_args(server_addr, num_hosts, host_idx)
    if join is None:
        return
    source, kwargs = join
    logging.info("joining the job's processes (%s)", source)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(**kwargs)
