"""Single-file Flax checkpoints: what Pax's pmap runs write without --pmap_use_tensorstore.

<job_dir>/checkpoints/checkpoint_<8-digit step> is one msgpack file (flax.serialization) holding
one replica of the train state and, for stream inputs, the input iterator's position. It is
written under a temporary name and renamed, so a write cut off midway is never a checkpoint,
and only by process 0: under pmap every process holds the same replica. Same surface as
pax.checkpoint.manager.Checkpointer, so the loop does not care which one it has.
"""

import functools
import json
import os
import re
from typing import Optional

import jax
import numpy as np
from flax import serialization

from pax.checkpoint.manager import (
    STEP_DIGITS,
    STEP_PREFIX,
    CheckpointError,
    check_compatible,
    restore_newest,
    step_name,
)

_NAME = re.compile(rf"{STEP_PREFIX}_(\d{{{STEP_DIGITS}}})")


class FlaxFileCheckpointer:
    def __init__(self, job_dir: str, max_to_keep: int, saving: bool = True):
        self.directory = os.path.join(os.path.abspath(job_dir), "checkpoints")
        self.max_to_keep = max_to_keep
        self.saving = saving

    def all_steps(self) -> list[int]:
        if not os.path.isdir(self.directory):
            return []
        names = (_NAME.fullmatch(n) for n in os.listdir(self.directory))
        return sorted(int(m.group(1)) for m in names if m)

    def latest_step(self) -> Optional[int]:
        steps = self.all_steps()
        return steps[-1] if steps else None

    def save(self, step: int, state, data=None) -> bool:
        if not self.saving:
            return False
        if jax.process_index() != 0:
            return True
        path = os.path.join(self.directory, step_name(step))
        blob = {"state": jax.device_get(state)}
        if data is not None:
            blob["data"] = json.dumps(data.get_state())
        try:
            os.makedirs(self.directory, exist_ok=True)
            with open(path + ".tmp", "wb") as f:
                f.write(serialization.msgpack_serialize(serialization.to_state_dict(blob)))
            os.replace(path + ".tmp", path)
        except OSError as e:
            kept = self.latest_step()
            kept = f"{step_name(kept)} is intact" if kept is not None else "there is no earlier one"
            raise CheckpointError(
                f"writing {path} failed ({e}); {kept}; free space or fix permissions "
                "there and rerun the same command to resume"
            ) from e
        for old in self.all_steps()[: -self.max_to_keep]:
            os.remove(os.path.join(self.directory, step_name(old)))
        return True

    def restore_latest(self, abstract_state, data=None, start_over: bool = False):
        """(step, state) of the newest checkpoint that reads back, or (None, None): another model's
        checkpoint is a UsageError, a damaged one is set aside, storage errors are retried, none
        left that reads is a UsageError unless start_over (pax.checkpoint.manager.restore_newest)."""
        attempt = functools.partial(self.restore, abstract_state=abstract_state, data=data)
        return restore_newest(
            self.directory, self.all_steps(), attempt, reload=lambda: None, start_over=start_over
        )

    def restore(self, step: int, abstract_state, data=None):
        """The state at `step`, placed by the shardings in abstract_state's ShapeDtypeStructs."""
        path = os.path.join(self.directory, step_name(step))
        with open(path, "rb") as f:
            blob = serialization.msgpack_restore(f.read())
        # The file's own tree (nested dicts, as to_state_dict spells the run's state) decides
        # whether another model wrote it before from_state_dict trips over a missing key.
        check_compatible(path, blob["state"], serialization.to_state_dict(abstract_state))
        state = serialization.from_state_dict(abstract_state, blob["state"])
        if data is not None and "data" in blob:
            data.set_state(json.loads(blob["data"]))
        return jax.tree.map(
            lambda a, s: jax.device_put(np.asarray(a, s.dtype), s.sharding), state, abstract_state
        )

    def close(self) -> None:
        """Saves are synchronous: nothing to wait for."""
