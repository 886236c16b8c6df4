"""The partitioning strategy, decided here once from the config, and everything that follows
from it: where the train state and the batches live, how the steps are compiled, and the
checkpoint format.

- spmd (ICI_MESH_SHAPE over (replica, data, mdl)): one jit over the device mesh, the state
  sharded by the logical-axis rules; orbax (tensorstore) checkpoints.
- pipeline (ICI_MESH_SHAPE with a `stage` axis and NUM_STAGES > 1): the same jit over the mesh;
  the model stacks its layers into stages (pax.parallel.pipeline).
- pmap (no ICI_MESH_SHAPE, as Pax's LmCloudTransformerAdam): every local device holds a full
  replica of the state (a leading device axis), takes its slice of the batch, and the step
  averages gradients across devices itself; Pax's single-file Flax checkpoints unless
  PMAP_USE_TENSORSTORE.

All offer the same surface to the loop. The state is checkpointed, initialized and restored in
its "host" form (mesh strategies: the sharded state as is; pmap: one replica) and turned into
the device form by `place`.
"""

import jax
import numpy as np
from flax import jax_utils

from pax.checkpoint.flax_file import FlaxFileCheckpointer
from pax.checkpoint.manager import Checkpointer
from pax.errors import UsageError
from pax.parallel import sharding
from pax.train import state as state_lib
from pax.train.step import make_eval_step, make_train_step

PMAP_AXIS = "batch"
SPMD, PIPELINE, PMAP = "spmd", "pipeline", "pmap"


def strategy(mesh_config) -> str:
    """spmd, pipeline or pmap, from the experiment's mesh config; UsageError if contradictory."""
    stages = mesh_config.num_stages
    if mesh_config.ici_mesh_shape is None:
        if stages > 1:
            raise UsageError(
                f"NUM_STAGES={stages} needs an ICI_MESH_SHAPE with a `stage` axis; without "
                "one the experiment runs data-parallel through pmap"
            )
        return PMAP
    return PIPELINE if stages > 1 else SPMD


def for_run(run):
    return Pmap(run) if run.strategy == PMAP else Spmd(run)


class _Placement:
    """What all share: the run, the abstract state and its shardings, initialization, and the
    identity between host and device forms (pmap alone adds a device axis)."""

    def __init__(self, run, mesh):
        self.run = run
        known = run.param_shardings if mesh is run.mesh else None
        self.abstract, self.shardings = state_lib.shardings(run.model, run.tx, mesh, known)

    def init(self, seed: int):
        return state_lib.initialize(self.run.model, self.run.tx, self.shardings, seed)

    def place(self, state):
        return state

    def unplace(self, state):
        return state

    def metrics(self, metrics):
        return metrics

    def checkpointer(self, job_dir: str, saving: bool):
        cfg = self.run.task.train
        return Checkpointer(
            job_dir, cfg.checkpoint_max_to_keep, cfg.async_checkpointing, saving=saving
        )


class Spmd(_Placement):
    def __init__(self, run):
        super().__init__(run, run.mesh)
        batch = sharding.batch_sharding(run.mesh)
        self.train_step = jax.jit(
            make_train_step(run.model, run.tx, run.lr_schedule),
            in_shardings=(self.shardings, batch),
            out_shardings=(self.shardings, sharding.replicated(run.mesh)),
            donate_argnums=0,
        )
        self.eval_step = jax.jit(
            make_eval_step(run.model),
            in_shardings=(state_lib.model_variables(self.shardings), batch),
            out_shardings=sharding.replicated(run.mesh),
        )
        self.rows = process_rows(run.mesh, run.global_batch)

    def batch(self, dataset, index: int):
        """Global batch `index` as sharded global arrays, fed with this process's rows."""
        run = self.run
        local = dataset.batch(index, run.global_batch, self.rows)
        return assemble(run.mesh, self.rows, local, run.global_batch)


class Pmap(_Placement):
    def __init__(self, run):
        self.devices = [d for d in run.mesh.devices.flat if d.process_index == jax.process_index()]
        one = jax.sharding.Mesh(
            np.asarray(self.devices[:1]).reshape((1,) * len(run.mesh.axis_names)),
            run.mesh.axis_names,
        )
        super().__init__(run, one)  # state initialized and checkpointed as one replica
        self.train_step = jax.pmap(
            make_train_step(run.model, run.tx, run.lr_schedule, axis_name=PMAP_AXIS),
            axis_name=PMAP_AXIS,
            devices=self.devices,
            donate_argnums=0,
        )
        self.eval_step = jax.pmap(
            make_eval_step(run.model, axis_name=PMAP_AXIS),
            axis_name=PMAP_AXIS,
            devices=self.devices,
        )

    def place(self, state):
        # Under pmap's own axis name, so the step's outputs match its inputs and it compiles once.
        return jax_utils.replicate(state, self.devices, axis_name=PMAP_AXIS)

    def unplace(self, state):
        """Replica 0: every replica is the same, the step keeps them so."""
        return jax_utils.unreplicate(state)

    def metrics(self, metrics):
        return self.unplace(metrics)

    def checkpointer(self, job_dir: str, saving: bool):
        cfg = self.run.task.train
        if cfg.pmap_use_tensorstore:
            return super().checkpointer(job_dir, saving)
        return FlaxFileCheckpointer(job_dir, cfg.checkpoint_max_to_keep, saving=saving)

    def batch(self, dataset, index: int):
        """This process's rows of batch `index`, split along a leading local-device axis."""
        n = len(self.devices)
        return {
            k: v.reshape((n, v.shape[0] // n) + v.shape[1:])
            for k, v in _local_rows(dataset, index, self.run).items()
        }


def _local_rows(dataset, index: int, run) -> dict:
    return dataset.batch(index, run.global_batch, process_stripe(run.global_batch))


def process_stripe(global_batch: int) -> slice:
    """This process's equal share of the batch, by process index (pmap, whose processes each
    read a part of a C4 stream of their own)."""
    per_process = global_batch // jax.process_count()
    return slice(jax.process_index() * per_process, (jax.process_index() + 1) * per_process)


def batch_rows(mesh, global_batch: int) -> dict:
    """Every process's rows of the global batch: process index -> the ascending global row
    indices its devices hold under the batch sharding.

    On a real slice a process's rows need not be adjacent: jax's physical mesh for a v4-64
    (`v4:2x4x4`, ICI_MESH_SHAPE [1,16,2]) gives each host rows 0..31 and 128..159 and so on.
    Where devices of two processes hold the same shard (`mdl` or `stage` spanning hosts), both
    processes hold its rows, and must feed them alike."""
    spec = sharding.batch_sharding(mesh, ndim=1)
    held: dict = {}
    for device, (index,) in spec.devices_indices_map((global_batch,)).items():
        held.setdefault(device.process_index, set()).update(range(global_batch)[index])
    return {p: np.array(sorted(rows), dtype=np.int64) for p, rows in held.items()}


def process_rows(mesh, global_batch: int) -> np.ndarray:
    """This process's rows of the global batch (batch_rows)."""
    return batch_rows(mesh, global_batch)[jax.process_index()]


def reader(mesh, global_batch: int, process: int | None = None) -> tuple[int, int]:
    """(index, count) of this process (or `process`) among a stream's readers (C4): processes
    whose devices hold the same rows (`mdl` or `stage` across hosts) are one reader, and read
    the same part of the stream, so they feed those rows alike; processes holding other rows
    read parts of their own. UsageError where two processes' rows overlap without being the
    same."""
    held = batch_rows(mesh, global_batch)
    groups = sorted({tuple(rows.tolist()) for rows in held.values()})
    if sum(map(len, groups)) != global_batch:
        raise UsageError(
            f"processes' batch rows overlap without being the same ({len(groups)} sets over "
            f"{global_batch} rows), which a stream read in parts cannot feed; order the mesh so "
            "that processes hold the same rows or none in common (DCN_MESH_SHAPE)"
        )
    process = jax.process_index() if process is None else process
    return groups.index(tuple(held[process].tolist())), len(groups)


def shard_of(local, rows, index: tuple, global_batch: int):
    """The part of this process's rows `local` (row i is global row rows[i], rows ascending)
    that a device whose shard of the global array is `index` holds."""
    wanted = np.arange(global_batch)[index[0]]
    return local[(np.searchsorted(rows, wanted),) + tuple(index[1:])]


def assemble(mesh, rows, local: dict, global_batch: int) -> dict:
    """Sharded global arrays from this process's rows of them: each of its devices takes its
    shard's rows, wherever they lie in the global batch (jax asks only for the shards of this
    process's devices)."""
    return {
        k: jax.make_array_from_callback(
            (global_batch,) + v.shape[1:],
            sharding.batch_sharding(mesh, v.ndim),
            lambda index, v=v: shard_of(v, rows, index, global_batch),
        )
        for k, v in local.items()
    }
