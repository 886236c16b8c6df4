"""GPipe pipeline parallelism over the `stage` mesh axis.

The layers are split into NUM_STAGES equal stages whose parameters are stacked on a leading
`stage` axis (sharded over the `stage` mesh axis), and the batch into NUM_MICROBATCHES
microbatches. Every tick each stage runs its layers on the microbatch it holds (one vmap over
the stages, so under SPMD each stage's devices compute only their own stage), then the
activations move one stage on: a jnp.roll over the stage axis, which XLA turns into a
collective-permute between neighbouring stages. Microbatch i enters stage 0 at tick i and
leaves the last stage at tick i + S - 1, so M microbatches take M + S - 1 ticks and each stage
idles for S - 1 of them. The backward pass is autodiff through the same schedule (reversed),
so gradients are exactly the unpipelined ones up to float reassociation.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from pax.parallel import sharding

CARRY_AXES = ("stage", "batch", "length", "act_embed")


def bubble_fraction(num_stages: int, num_microbatches: int) -> float:
    """The share of stage-ticks a GPipe schedule spends idle: (S - 1) / (M + S - 1)."""
    return (num_stages - 1) / (num_microbatches + num_stages - 1)


def to_microbatches(a, num_microbatches: int):
    """(batch, ...) -> (microbatches, batch // microbatches, ...), microbatch i = rows i::M.

    Strided rather than contiguous: each device's contiguous shard of the batch then holds an
    equal slice of every microbatch, so splitting moves no data between devices.
    """
    return a.reshape((a.shape[0] // num_microbatches, num_microbatches) + a.shape[1:]).swapaxes(
        0, 1
    )


def from_microbatches(a):
    return a.swapaxes(0, 1).reshape((a.shape[0] * a.shape[1],) + a.shape[2:])


class _Tick(nn.Module):
    """One tick of the schedule: shift activations a stage on, feed stage 0, run every stage."""

    stage: Any  # one stage's Module class: stage(**stage_kwargs)(x, positions[, segment_ids])
    stage_kwargs: dict
    num_stages: int
    collections: tuple  # the layer's variable collections, stacked on the stage axis
    mesh: Any = None
    rules: tuple = sharding.LOGICAL_AXIS_RULES

    @nn.compact
    def __call__(self, carry, fed):
        # Activations, positions and (packed inputs) segment ids travel together.
        x, *side = (jnp.roll(c, 1, axis=0).at[0].set(f) for c, f in zip(carry, fed))
        if self.mesh is not None:
            x = jax.lax.with_sharding_constraint(
                x, sharding.logical_sharding(CARRY_AXES, x.shape, self.mesh, self.rules)
            )
        stages = nn.vmap(
            self.stage,
            variable_axes={c: 0 for c in self.collections},
            split_rngs={"params": True},
            in_axes=0,
            out_axes=0,
            axis_size=self.num_stages,
            spmd_axis_name="stage" if self.mesh is not None else None,
            metadata_params={nn.PARTITION_NAME: "stage"},
        )
        x = stages(**self.stage_kwargs, name="stages")(x, *side)
        return (x, *side), x[-1]


class Pipeline(nn.Module):
    """Runs (batch, length, embed) activations through `stage` × num_stages as a GPipe.

    Drain ticks feed zeros: segment id 0 everywhere, so padding attends only to padding.
    """

    stage: Any
    stage_kwargs: dict
    num_stages: int
    num_microbatches: int
    # The stage's variable collections (params, and FP8's scales where the model has them).
    collections: tuple = ("params",)
    mesh: Any = None
    rules: tuple = sharding.LOGICAL_AXIS_RULES

    @nn.compact
    def __call__(self, x, positions, segment_ids=None):
        s, m = self.num_stages, self.num_microbatches
        fed = []
        for a in (x, positions) + (() if segment_ids is None else (segment_ids,)):
            a = to_microbatches(a, m)
            # After the last microbatch, stage 0 is fed zeros while the pipeline drains.
            fed.append(jnp.concatenate([a, jnp.zeros((s - 1,) + a.shape[1:], a.dtype)]))
        carry = tuple(jnp.zeros((s,) + a.shape[1:], a.dtype) for a in fed)
        # Every tick reuses the stages' variables; FP8 amaxes of the ticks combine by max
        # (pax.models.fp8.for_differentiation), parameter gradients by sum.
        ticks = nn.scan(
            _Tick,
            variable_broadcast=list(self.collections),
            split_rngs={"params": False},
            length=m + s - 1,
        )
        _, out = ticks(
            self.stage, self.stage_kwargs, s, self.collections, self.mesh, self.rules, name="ticks"
        )(carry, tuple(fed))
        # The last stage's output at tick t is microbatch t - (s - 1).
        return from_microbatches(out[s - 1 :])
