"""Turning an experiment into a run (praxis' `instantiate`: a config made into objects): the
mesh its devices make, the model, the optimizer, the input pipelines and the pipeline's
microbatch count, resolved and checked (UsageError) before anything is written.
pax.train.loop trains and evaluates what `instantiate` returns."""

import dataclasses
import functools

import jax

from pax import data
from pax.errors import UsageError
from pax.experiments import base
from pax.experiments import config as config_lib
from pax.models.transformer import TransformerLm
from pax.optim import optimizers
from pax.parallel import mesh as mesh_lib
from pax.parallel.mesh import build_mesh
from pax.train import placement
from pax.train import state as state_lib


@dataclasses.dataclass
class TrainingRun:
    """An experiment resolved for its devices: everything training needs, before the job
    directory is touched."""

    task: config_lib.TaskConfig
    datasets: list
    mesh: jax.sharding.Mesh
    model: TransformerLm
    tx: object
    lr_schedule: object
    train_data: object
    eval_data: dict
    global_batch: int
    strategy: str  # placement.SPMD, PIPELINE or PMAP
    # The parameters' shardings on `mesh`, checked in instantiate (None for pmap, which places
    # whole replicas): placement reuses them.
    param_shardings: object = None


def instantiate(experiment, devices=None, with_data: bool = True) -> TrainingRun:
    """Resolve and validate an experiment; raises UsageError before anything is written.

    devices: the devices to build the mesh from (default: all of them). What depends on them
    is resolved here and recorded in run.task: a -1 in ICI_MESH_SHAPE, and the pipeline's
    microbatches from MICROBATCH_SIZE (Pax: the global batch over the microbatch size).
    with_data: build the input pipelines (decoding reads none; train_data is then None).
    """
    task = experiment.task()
    devices = list(devices or jax.devices())
    task = dataclasses.replace(task, mesh=mesh_lib.resolve(task.mesh, len(devices)))
    mesh = build_mesh(task.mesh, devices)
    strategy = placement.strategy(task.mesh)
    pmap = strategy == placement.PMAP
    stages = task.mesh.num_stages
    global_batch = task.train.percore_batch_size * len(devices)
    batch_shards = mesh.shape["replica"] * mesh.shape["data"]
    if global_batch % batch_shards or global_batch % jax.process_count():
        raise UsageError(
            f"global batch {global_batch} does not split over {batch_shards} batch "
            f"shards and {jax.process_count()} processes; change PERCORE_BATCH_SIZE"
        )
    task = _resolve_microbatches(task, mesh, global_batch, batch_shards)
    datasets = base.datasets(task)
    model = TransformerLm(
        task.model,
        mesh=None if pmap else mesh,
        num_stages=stages,
        num_microbatches=task.mesh.num_microbatches,
    )
    # A weight the mesh cannot split is a UsageError here, before any file is written.
    param_shardings = None if pmap else state_lib.param_shardings(model, mesh)
    tx, lr_schedule = optimizers.build(task.optimizer, state_lib.repeat_prefix(model))
    train_cfg = next(d for d in datasets if d.is_training)
    vocab = task.model.vocab_size
    # A stream's reader: pmap's processes each feed their own stripe, a mesh's by its rows.
    reader = None if pmap else functools.partial(placement.reader, mesh, global_batch)
    train_data = data.build(train_cfg, vocab, reader) if with_data else None
    if (
        with_data
        and pmap
        and not task.train.pmap_use_tensorstore
        and jax.process_count() > 1
        and data.stream(train_data) is not None
    ):
        raise UsageError(
            "a single-file Flax checkpoint holds one input position, but each of the "
            f"{jax.process_count()} processes reads its own share of the stream; "
            "add --pmap_use_tensorstore"
        )
    evals = [d for d in datasets if not d.is_training and with_data]
    eval_data = {d.name: data.build(d, vocab, reader) for d in evals}
    return TrainingRun(
        task,
        datasets,
        mesh,
        model,
        tx,
        lr_schedule,
        train_data,
        eval_data,
        global_batch,
        strategy,
        param_shardings,
    )


def _resolve_microbatches(task, mesh, global_batch: int, batch_shards: int):
    """The pipeline's microbatch count, checked against the mesh and the batch."""
    m = task.mesh
    stages = m.num_stages
    mesh_stages = mesh.shape.get("stage", 1)
    if stages != mesh_stages:
        raise UsageError(
            f"NUM_STAGES={stages} but the mesh has {mesh_stages} along `stage`; make "
            "them equal (MESH_AXIS_NAMES needs a `stage` axis for NUM_STAGES > 1)"
        )
    if stages == 1:
        return dataclasses.replace(task, mesh=dataclasses.replace(m, num_microbatches=1))
    microbatches = m.num_microbatches
    if m.microbatch_size is not None:
        # praxis LayerwiseShardablePipelined: num_microbatches = batch // microbatch_size, the
        # batch being the global one (the layer sees global shapes under SPMD).
        if global_batch % m.microbatch_size:
            raise UsageError(
                f"the global batch of {global_batch} rows does not split into microbatches of "
                f"MICROBATCH_SIZE={m.microbatch_size}; change PERCORE_BATCH_SIZE or MICROBATCH_SIZE"
            )
        microbatches = global_batch // m.microbatch_size
    if (global_batch // batch_shards) % microbatches:
        raise UsageError(
            f"each batch shard holds {global_batch // batch_shards} rows, which do not split "
            f"into {microbatches} microbatches; change PERCORE_BATCH_SIZE, NUM_MICROBATCHES or "
            "MICROBATCH_SIZE"
        )
    return dataclasses.replace(task, mesh=dataclasses.replace(m, num_microbatches=microbatches))
