"""Every host's input feed on the TPU slices of Pax's reference experiments, simulated on one
CPU machine: `python -m tests.train.feed_layouts OUT.json` in an env with libtpu. The slices'
devices, each with its process index, are jax's TPU topology description's (no chip is opened);
the mesh is the one the trainer builds on them. For each process it takes the rows
pax.train.placement gives it, reads them from a synthetic dataset, and hands each of its
devices its shard as `placement.assemble` would; the global rows a device got are found by their
content; and which part of a stream each reads. Run by tests/train/test_placement.py (the
tests' own env has no libtpu).
"""

import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # no chip is opened: plans may overlap

import json  # noqa: E402

from pax import aot  # noqa: E402
from pax.data.sources import SyntheticDataset  # noqa: E402
from pax.parallel import sharding  # noqa: E402
from pax.train import placement  # noqa: E402
from pax.train.instantiate import instantiate  # noqa: E402

# Rows of 8 random tokens out of 2**20: distinct rows of a batch of 512 with overwhelming odds,
# so a row's content names it.
VOCAB, SEQ = 2**20, 8


def simulate(plan: aot.Plan) -> dict:
    """The slice's processes' rows, and per device: its process, the global rows its shard is
    (the sharding's own indices) and the global rows it was fed (by content)."""
    cls = aot._experiment(plan)
    target = aot.slice_for(plan.generation, aot._mesh_size(cls))
    run = instantiate(aot._as_on_target(cls, tpu=True)(), devices=target.devices(), with_data=False)
    n, data = run.global_batch, SyntheticDataset(VOCAB, SEQ, seed=0)
    whole = data.batch(0, n)["inputs"]
    named = {row.tobytes(): i for i, row in enumerate(whole)}
    assert len(named) == n, "two rows of the synthetic batch are equal: use longer rows"
    spec = sharding.batch_sharding(run.mesh, whole.ndim)
    indices = spec.devices_indices_map(whole.shape)
    processes = placement.batch_rows(run.mesh, n)
    devices = []
    for process, rows in processes.items():
        local = data.batch(0, n, rows)["inputs"]
        for device, index in indices.items():
            if device.process_index != process:
                continue
            fed = placement.shard_of(local, rows, index, n)
            devices.append(
                {
                    "process": process,
                    "device": device.id,
                    "shard": list(range(n)[index[0]]),
                    "fed": [named.get(row.tobytes(), -1) for row in fed],
                }
            )
    return {
        "experiment": cls.__name__,
        "slice": target.name,
        "topology": target.topology,
        "strategy": run.strategy,
        "mesh": dict(run.mesh.shape),
        "global_batch": n,
        "processes": {str(p): rows.tolist() for p, rows in processes.items()},
        # Which part of a stream (C4) each process reads: (index, count).
        "readers": {str(p): placement.reader(run.mesh, n, p) for p in processes},
        "devices": devices,
    }


def main(out: str) -> None:
    plans = [p for p in aot.reference_plans() if not p.sets]
    slices = []
    for plan in plans:
        if aot._experiment(plan).ICI_MESH_SHAPE is None:
            continue  # pmapped: each process feeds its stripe to its own devices (Pmap.batch)
        slices.append(simulate(plan))
    with open(out, "w") as f:
        json.dump(slices, f)


if __name__ == "__main__":
    main(sys.argv[1])
