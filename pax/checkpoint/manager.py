"""Orbax checkpointing in Pax's layout: <job_dir>/checkpoints/checkpoint_<8-digit step>/state.

Each checkpoint is a Composite: `state` (the train state) and, for inputs that are streams (C4),
`data`: the input iterator's position, one JSON file per process written by grain's orbax
handler. Checkpoints without `data` still restore. Orbax writes to a temporary directory and
renames it when complete, so a checkpoint cut off mid-write is never listed as a step.
"""

import json
import os
import shutil
from typing import Optional

import jax
import orbax.checkpoint as ocp
from absl import logging

from pax.errors import UsageError

STEP_PREFIX = "checkpoint"
STEP_DIGITS = 8
SET_ASIDE_DIR = "checkpoints_damaged"  # beside checkpoints/: orbax never lists it


class CheckpointError(Exception):
    """A checkpoint could not be written; the message says which and what survives."""


class Checkpointer:
    def __init__(
        self, job_dir: str, max_to_keep: int, async_save: bool = True, saving: bool = True
    ):
        self.directory = os.path.join(os.path.abspath(job_dir), "checkpoints")
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

    def save(self, step: int, state, data=None) -> bool:
        """Starts saving `state` as step `step` (asynchronously unless configured otherwise), with
        the input iterator `data` (get_state() -> JSON-able dict, set_state(dict)) when given.

        A failure of this save, or of the previous asynchronous one, raises CheckpointError:
        a run must not go on without checkpoints.
        """
        if not self.saving:
            return False
        try:
            # Orbax silently skips a save requested while the previous one is still being written;
            # every save asked for here must happen, so wait for that one first.
            self._manager.wait_until_finished()
            items = {"state": ocp.args.StandardSave(state)}
            if data is not None:
                items["data"] = _grain_checkpoint().CheckpointSave(_AsBytes(data))
            return self._manager.save(step, args=ocp.args.Composite(**items), force=True)
        except Exception as e:  # orbax re-raises background write errors of any type here
            raise self._write_error(step, e) from e

    def _write_error(self, step: int, error: Exception) -> CheckpointError:
        self._manager.reload()
        kept = self._manager.latest_step()
        kept = (
            f"checkpoint_{kept:0{STEP_DIGITS}d} is intact"
            if kept is not None
            else "there is no earlier checkpoint"
        )
        return CheckpointError(
            f"writing a checkpoint under {self.directory} failed near step "
            f"{step} ({type(error).__name__}: {error}); {kept}; free space or fix "
            "permissions there and rerun the same command to resume"
        )

    def restore_latest(self, abstract_state, data=None):
        """(step, state) of the newest checkpoint that restores, or (None, None); `data`, an input
        iterator, is set to the position saved with it.

        A damaged checkpoint (truncated or corrupted files) is moved aside to
        <job_dir>/checkpoints_damaged/, reported in one line, and the previous one is tried.
        """
        for step in sorted(self.all_steps(), reverse=True):
            if data is not None:
                self._check_data(step)
            try:
                return step, self.restore(step, abstract_state, data)
            except Exception as e:  # tensorstore, orbax and json raise many types on damaged data
                set_aside(self.directory, step, e)
                self._manager.reload()
        return None, None

    def restore(self, step: int, abstract_state, data=None):
        """The state at `step`, placed by the shardings in abstract_state's ShapeDtypeStructs;
        `data` (an input iterator) is set to its saved position where the checkpoint has one."""
        items = {"state": ocp.args.StandardRestore(abstract_state)}
        if data is not None and os.path.isdir(self._data_dir(step)):
            items["data"] = _grain_checkpoint().CheckpointRestore(_AsBytes(data))
        restored = self._manager.restore(step, args=ocp.args.Composite(**items))
        return restored["state"]

    def _data_dir(self, step: int) -> str:
        return os.path.join(self.directory, f"{STEP_PREFIX}_{step:0{STEP_DIGITS}d}", "data")

    def _check_data(self, step: int) -> None:
        """An input position saved by another number of processes is a usage error, not damage."""
        directory = self._data_dir(step)
        if not os.path.isdir(directory):
            return
        mine = f"process_{jax.process_index()}-of-{jax.process_count()}.json"
        if not os.path.isfile(os.path.join(directory, mine)):
            found = sorted(os.listdir(directory))
            raise UsageError(
                f"{directory} holds the input position of another set of processes "
                f"({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}), not {mine}; "
                "resume with the number of processes that wrote it"
            )

    def close(self) -> None:
        """Waits for the last save to finish; raises CheckpointError if it failed."""
        try:
            self._manager.wait_until_finished()
        except Exception as e:  # the background save's own error type
            raise self._write_error(self._manager.latest_step() or 0, e) from e
        finally:
            self._manager.close()


def step_name(step: int) -> str:
    return f"{STEP_PREFIX}_{step:0{STEP_DIGITS}d}"


def set_aside(directory: str, step: int, error: Exception) -> None:
    """Moves a damaged checkpoint to <job_dir>/checkpoints_damaged/ and says so in one line."""
    name = step_name(step)
    aside = os.path.join(os.path.dirname(directory), SET_ASIDE_DIR, name)
    os.makedirs(os.path.dirname(aside), exist_ok=True)
    shutil.move(os.path.join(directory, name), aside)
    logging.error(
        "checkpoint %s is damaged (%s: %s); moved to %s; trying the previous one",
        name,
        type(error).__name__,
        str(error).splitlines()[0][:200] if str(error) else "",
        aside,
    )


class _AsBytes:
    """An input iterator (get_state() -> JSON-able dict) as grain's orbax handler takes one that
    is not a grain DatasetIterator: state as JSON bytes, and a start_prefetch() to call."""

    def __init__(self, data):
        self.data = data

    def get_state(self) -> bytes:
        return json.dumps(self.data.get_state()).encode()

    def set_state(self, state: bytes) -> None:
        self.data.set_state(json.loads(state))

    def start_prefetch(self) -> None:
        """The input restarts at its next batch by itself."""


def _grain_checkpoint():
    """grain's orbax handler (per-process JSON files); imported only for stream inputs (C4)."""
    from grain import checkpoint

    return checkpoint
