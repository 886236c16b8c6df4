"""Multi-process JAX: one process per host, joined through a coordinator."""
from typing import Optional

import jax

from pax.errors import UsageError


def initialize(server_addr: Optional[str], num_hosts: int, host_idx: Optional[int]) -> None:
  """jax.distributed from Pax-style flags; without an address, jax's own cluster detection.

  On CPU the collectives run over gloo, which is what multi-process tests on one machine use.
  """
  if host_idx is not None and not 0 <= host_idx < num_hosts:
    raise UsageError(f'--host_idx={host_idx} is outside 0..{num_hosts - 1}')
  if server_addr and host_idx is None:
    raise UsageError("--server_addr needs --host_idx (this process's index)")
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  jax.distributed.initialize(coordinator_address=server_addr, num_processes=num_hosts,
                             process_id=host_idx)
