"""Orbax checkpointing in Pax's layout: <job_dir>/checkpoints/checkpoint_<8-digit step>/state.

Each checkpoint is a Composite so later items (the input iterator's state) slot in beside
`state` without changing the layout. Orbax writes to a temporary directory and renames it when
complete, so a checkpoint cut off mid-write is never listed as a step.
"""
import os
from typing import Optional

import orbax.checkpoint as ocp

STEP_PREFIX = 'checkpoint'
STEP_DIGITS = 8


class Checkpointer:

  def __init__(self, job_dir: str, max_to_keep: int, async_save: bool = True,
               saving: bool = True):
    self.directory = os.path.join(os.path.abspath(job_dir), 'checkpoints')
    self.saving = saving
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep,
        step_prefix=STEP_PREFIX,
        step_format_fixed_length=STEP_DIGITS,
        enable_async_checkpointing=async_save,
        create=saving,
    )
    self._manager = ocp.CheckpointManager(self.directory, options=options)

  def latest_step(self) -> Optional[int]:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    return list(self._manager.all_steps())

  def save(self, step: int, state) -> bool:
    """Starts saving `state` as step `step` (asynchronously unless configured otherwise)."""
    if not self.saving:
      return False
    return self._manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state)),
                              force=True)

  def restore(self, step: int, abstract_state):
    """The state at `step`, placed by the shardings in abstract_state's ShapeDtypeStructs."""
    restored = self._manager.restore(
        step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state)))
    return restored['state']

  def wait(self) -> None:
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()
