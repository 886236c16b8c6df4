"""Logical axis names → mesh axes: the one table that decides where every array lives.

Weights are split over `data` and `mdl` as Pax does (2-D sharding: the `embed` side over
`data`, the `mlp`/`heads`/`vocab` side over `mdl`); batches over (`replica`, `data`).
"""

import math

import jax
from jax.sharding import NamedSharding, PartitionSpec

from pax.errors import UsageError

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


# What to change when a parameter's dimension does not split over its mesh axes.
_FIXES = {
    "vocab": "pad the vocabulary: --set VOCAB_PAD_MULTIPLE={split} (the padded ids are masked "
    "out of the loss)",
    "embed": "choose a MODEL_DIMS that {split} divides",
    "mlp": "choose a HIDDEN_DIMS that {split} divides",
    "heads": "choose a NUM_HEADS (NUM_KV_HEADS with grouped-query attention) that {split} divides",
}


def _spec(names, shape, mesh_shape, rules, indivisible):
    spec, used = [], set()
    for dim, (name, size) in enumerate(zip(names or (None,) * len(shape), shape)):
        axes = _mesh_axes(name, rules) if name else None
        axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
        axes = tuple(a for a in axes if a in mesh_shape and mesh_shape[a] > 1 and a not in used)
        split = math.prod(mesh_shape[a] for a in axes)
        if axes and size % split:
            indivisible(dim, name, size, axes, split)
            axes = ()
        if not axes:
            spec.append(None)
            continue
        used.update(axes)
        spec.append(axes[0] if len(axes) == 1 else axes)
    return PartitionSpec(*spec)


def logical_sharding(
    names, shape, mesh: jax.sharding.Mesh, rules=LOGICAL_AXIS_RULES
) -> NamedSharding:
    """A NamedSharding for an activation with these logical axis names (a constraint inside a
    step). A dimension that its mesh axes do not divide stays unsplit there, and a mesh axis
    already used by an earlier dimension is not used twice. Parameters: param_sharding."""
    return NamedSharding(mesh, _spec(names, shape, mesh.shape, rules, lambda *_: None))


def param_spec(path: str, names, shape, mesh_shape, rules=LOGICAL_AXIS_RULES) -> PartitionSpec:
    """A stored array's PartitionSpec from its logical axis names, or a UsageError where its mesh
    axes do not divide a dimension. GSPMD could split it unevenly inside a program, but jax
    places a stored array (device_put, jit's in/out shardings) only on axes that divide it, and
    leaving it unsplit would put a whole copy, often the largest weight, on every device."""

    def refuse(dim, name, size, axes, split):
        over = " x ".join(f"`{a}` ({mesh_shape[a]})" for a in axes)
        fix = _FIXES.get(name, "change its size").format(split=split)
        raise UsageError(
            f"parameter {path}: dimension {dim} ({name}, {size}) does not split over mesh axis "
            f"{over}, and it would be replicated on every device; {fix}, or change "
            "ICI_MESH_SHAPE/DCN_MESH_SHAPE"
        )

    return _spec(names, shape, mesh_shape, rules, refuse)


def param_sharding(
    path: str, names, shape, mesh: jax.sharding.Mesh, rules=LOGICAL_AXIS_RULES
) -> NamedSharding:
    """param_spec on `mesh`."""
    return NamedSharding(mesh, param_spec(path, names, shape, mesh.shape, rules))


def batch_sharding(mesh: jax.sharding.Mesh, ndim: int = 2) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec(("replica", "data"), *([None] * (ndim - 1))))


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())
