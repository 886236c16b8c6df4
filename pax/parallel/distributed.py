"""Multi-process JAX: one process per host, joined through a coordinator.

Two ways in: Pax's multiprocess flags (--server_addr, --num_hosts, --host_idx), or, without
them, the cluster jax detects itself: TPU pod slices, Slurm steps and Open MPI (there jax gives
each process one GPU, so launch one task per GPU), Kubernetes Jobs where the `kubernetes`
package is installed (the images leave it out; their GPU JobSet passes the flags).
"""

from typing import Optional

import jax
from absl import logging

# jax's own cluster detection has no public entry point short of initialize(), which fails where
# there is no cluster; its registry is read here and only here (tests pin the contract).
from jax._src import clusters

from pax.errors import UsageError


def detect_cluster() -> Optional[tuple[str, int]]:
    """The cluster jax.distributed.initialize() would join on its own: (kind, process count).

    Same candidates in the same order as jax's auto-detection, opt-in ones (mpi4py) left out as
    jax does; None where there is none (a plain single-host run).
    """
    for env in clusters.ClusterEnv._cluster_types:
        if not env.opt_in_only_method and env.is_env_present():
            return env.__name__, env.get_process_count()
    return None


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
    found = detect_cluster()
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
