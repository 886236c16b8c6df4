"""Orbax checkpointing in Pax's layout: <job_dir>/checkpoints/checkpoint_<8-digit step>/state.

Each checkpoint is a Composite so later items (the input iterator's state) slot in beside
`state` without changing the layout. Orbax writes to a temporary directory and renames it when
complete, so a checkpoint cut off mid-write is never listed as a step.
"""
import os
import shutil
from typing import Optional

import orbax.checkpoint as ocp
from absl import logging

STEP_PREFIX = 'checkpoint'
STEP_DIGITS = 8
SET_ASIDE_DIR = 'checkpoints_damaged'  # beside checkpoints/: orbax never lists it


class CheckpointError(Exception):
  """A checkpoint could not be written; the message says which and what survives."""


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
    """Starts saving `state` as step `step` (asynchronously unless configured otherwise).

    A failure of this save, or of the previous asynchronous one, raises CheckpointError:
    a run must not go on without checkpoints.
    """
    if not self.saving:
      return False
    try:
      # Orbax silently skips a save requested while the previous one is still being written;
      # every save asked for here must happen, so wait for that one first.
      self._manager.wait_until_finished()
      return self._manager.save(
          step, args=ocp.args.Composite(state=ocp.args.StandardSave(state)), force=True)
    except Exception as e:  # orbax re-raises background write errors of any type here
      raise self._write_error(step, e) from e

  def _write_error(self, step: int, error: Exception) -> CheckpointError:
    self._manager.reload()
    kept = self._manager.latest_step()
    kept = f'checkpoint_{kept:0{STEP_DIGITS}d} is intact' if kept is not None else \
        'there is no earlier checkpoint'
    return CheckpointError(f'writing a checkpoint under {self.directory} failed near step '
                           f'{step} ({type(error).__name__}: {error}); {kept}; free space or fix '
                           'permissions there and rerun the same command to resume')

  def restore_latest(self, abstract_state):
    """(step, state) of the newest checkpoint that restores, or (None, None).

    A damaged checkpoint (truncated or corrupted files) is moved aside to
    <job_dir>/checkpoints_damaged/, reported in one line, and the previous one is tried.
    """
    for step in sorted(self.all_steps(), reverse=True):
      try:
        return step, self.restore(step, abstract_state)
      except Exception as e:  # tensorstore, orbax and json raise many types on damaged data
        name = f'{STEP_PREFIX}_{step:0{STEP_DIGITS}d}'
        aside = os.path.join(os.path.dirname(self.directory), SET_ASIDE_DIR, name)
        os.makedirs(os.path.dirname(aside), exist_ok=True)
        shutil.move(os.path.join(self.directory, name), aside)
        self._manager.reload()
        logging.error('checkpoint %s is damaged (%s: %s); moved to %s; trying the previous one',
                      name, type(e).__name__, str(e).splitlines()[0][:200] if str(e) else '',
                      aside)
    return None, None

  def restore(self, step: int, abstract_state):
    """The state at `step`, placed by the shardings in abstract_state's ShapeDtypeStructs."""
    restored = self._manager.restore(
        step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state)))
    return restored['state']

  def close(self) -> None:
    """Waits for the last save to finish; raises CheckpointError if it failed."""
    try:
      self._manager.wait_until_finished()
    except Exception as e:  # the background save's own error type
      raise self._write_error(self._manager.latest_step() or 0, e) from e
    finally:
      self._manager.close()
