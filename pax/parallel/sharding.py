"""Logical axis names → mesh axes: the one table that decides where every array lives.

Weights are split over `data` and `mdl` as Pax does (2-D sharding: the `embed` side over
`data`, the `mlp`/`heads`/`vocab` side over `mdl`); batches over (`replica`, `data`).
"""

import jax
from jax.sharding import NamedSharding, PartitionSpec

LOGICAL_AXIS_RULES = (
    ("batch", ("replica", "data")),
    ("embed", "data"),
    ("mlp", "mdl"),
    ("heads", "mdl"),
    ("vocab", "mdl"),
    ("kv", None),
    ("layers", None),
    ("stage", "stage"),
    ("length", None),
    ("act_embed", "mdl"),
    ("act_mlp", "mdl"),
    ("act_vocab", "mdl"),
)


def _mesh_axes(name, rules):
    for logical, mesh_axis in rules:
        if logical == name:
            return mesh_axis
    return None


def logical_sharding(
    names, shape, mesh: jax.sharding.Mesh, rules=LOGICAL_AXIS_RULES
) -> NamedSharding:
    """A NamedSharding for an array with these logical axis names.

    A dimension that the mesh axes do not divide evenly stays unsplit (for example Pax's GPT-3
    vocabulary of 50257 over 4 `mdl` shards), and a mesh axis already used by an earlier
    dimension is not used twice.
    """
    spec, used = [], set()
    for name, size in zip(names or (None,) * len(shape), shape):
        axes = _mesh_axes(name, rules) if name else None
        axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
        axes = tuple(a for a in axes if a in mesh.shape and mesh.shape[a] > 1 and a not in used)
        split = 1
        for a in axes:
            split *= mesh.shape[a]
        if not axes or size % split:
            spec.append(None)
            continue
        used.update(axes)
        spec.append(axes[0] if len(axes) == 1 else axes)
    return NamedSharding(mesh, PartitionSpec(*spec))


def batch_sharding(mesh: jax.sharding.Mesh, ndim: int = 2) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec(("replica", "data"), *([None] * (ndim - 1))))


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())
