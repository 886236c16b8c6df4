"""The trainer's own train step, compiled once for a set of devices and timed: what the FP8
check and the accelerator benchmark measure (the same jitted step `python -m pax.main` runs,
fed from the experiment's own input pipeline, without the loop's I/O around it)."""

import time

import jax
import jax.numpy as jnp

from pax.experiments import registry
from pax.models import platform
from pax.parallel import sharding
from pax.train import placement
from pax.train.instantiate import instantiate

# The train step's batch: token ids, next-token targets, loss weights.
BATCH = (("inputs", jnp.int32), ("targets", jnp.int32), ("weights", jnp.float32))


def one_device(name: str, batch=None, **overrides):
    """Experiment `name` on one device: synthetic tokens, bf16 activations, no pipeline;
    PERCORE_BATCH_SIZE `batch` (or the experiment's) and any other hyper-parameters given."""
    cls = registry.get(name)
    attrs = dict(
        FPROP_DTYPE="bfloat16",
        DATA_SOURCE="synthetic",
        EVAL_NUM_BATCHES=1,
        MESH_AXIS_NAMES=("replica", "data", "mdl"),
        ICI_MESH_SHAPE=(1, 1, 1),
        DCN_MESH_SHAPE=None,
        NUM_STAGES=1,
        NUM_MICROBATCHES=1,
        MICROBATCH_SIZE=None,
    )
    if batch:
        attrs["PERCORE_BATCH_SIZE"] = batch
    return type(cls.__name__, (cls,), {**attrs, **overrides})()


def lower_for(experiment, devices):
    """(run, placement, lowered step) of an experiment's SPMD train step for `devices`, which
    need not be this host's (compile-only devices of a GPU topology): its state and batch as
    shapes, nothing allocated or read."""
    with platform.target(devices):
        run = instantiate(experiment, devices=devices)
        place = placement.Spmd(run)
        spec = sharding.batch_sharding(run.mesh)
        shape = (run.global_batch, run.task.model.seq_len)
        batch = {k: jax.ShapeDtypeStruct(shape, dtype, sharding=spec) for k, dtype in BATCH}
        return run, place, place.train_step.lower(place.abstract, batch)


def plan_bytes(compiled) -> int:
    """A compiled step's memory per device: arguments + outputs - donated aliases +
    temporaries, from the compiler's own plan (memory_analysis)."""
    m = compiled.memory_analysis()
    return (
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        - m.alias_size_in_bytes
        + m.temp_size_in_bytes
    )


class CompiledStep:
    """An experiment's SPMD train step on `devices`, compiled on construction, its state
    initialized and `num_batches` batches of its training input placed on the devices."""

    def __init__(self, experiment, devices, num_batches: int = 2):
        self.run = instantiate(experiment, devices=devices)
        place = placement.Spmd(self.run)
        self.abstract = place.abstract
        self.batches = [place.batch(self.run.train_data, i) for i in range(num_batches)]
        self.lowered = place.train_step.lower(place.abstract, self.batches[0])
        start = time.perf_counter()
        self.compiled = self.lowered.compile()
        self.compile_s = time.perf_counter() - start
        self.state = place.init(self.run.task.train.seed)
        self.i = 0
        self.losses = []

    def interval(self, steps: int) -> float:
        """Seconds per step over `steps` steps, all dispatched before one wait; the loss of
        the last one is appended to self.losses."""
        start = time.perf_counter()
        for _ in range(steps):
            batch = self.batches[self.i % len(self.batches)]
            self.state, metrics = self.compiled(self.state, batch)
            self.i += 1
        jax.block_until_ready(metrics)
        seconds = (time.perf_counter() - start) / steps
        self.losses.append(float(metrics["loss"]))
        return seconds

    def memory(self) -> dict:
        """The compiled executable's own memory plan, bytes per device."""
        m = self.compiled.memory_analysis()
        return {
            "arguments": m.argument_size_in_bytes,
            "outputs": m.output_size_in_bytes,
            "temporaries": m.temp_size_in_bytes,
            "generated_code": m.generated_code_size_in_bytes,
            "aliased": m.alias_size_in_bytes,
        }
