"""The device mesh from Pax's ICI and DCN mesh shapes."""

import math
from typing import Optional, Sequence

import jax
import numpy as np
from jax.experimental import mesh_utils

from pax.errors import UsageError
from pax.experiments.config import MeshConfig


def mesh_shape(config: MeshConfig, num_devices: int) -> tuple[int, ...]:
    """The full mesh shape: ICI × DCN per axis; no ICI shape means data-parallel over all."""
    if config.ici_mesh_shape is None:
        shape = [1] * len(config.axis_names)
        shape[config.axis_names.index("data")] = num_devices
        return tuple(shape)
    ici = tuple(config.ici_mesh_shape)
    dcn = tuple(config.dcn_mesh_shape or (1,) * len(ici))
    if len(ici) != len(config.axis_names) or len(dcn) != len(ici):
        raise UsageError(
            f"ICI_MESH_SHAPE {list(ici)} and DCN_MESH_SHAPE {list(dcn)} must each have "
            f"{len(config.axis_names)} entries, one per mesh axis {config.axis_names}"
        )
    return tuple(i * d for i, d in zip(ici, dcn))


def build_mesh(config: MeshConfig, devices: Optional[Sequence] = None) -> jax.sharding.Mesh:
    devices = list(devices if devices is not None else jax.devices())
    shape = mesh_shape(config, len(devices))
    needed = math.prod(shape)
    if needed != len(devices):
        fix = (
            f"on CPU set XLA_FLAGS=--xla_force_host_platform_device_count={needed} before "
            f"starting, or "
            if devices[0].platform == "cpu"
            else ""
        )
        raise UsageError(
            f"mesh {dict(zip(config.axis_names, shape))} needs {needed} devices but "
            f"{len(devices)} {devices[0].platform} device(s) are available; {fix}"
            f"override the mesh, e.g. --set ICI_MESH_SHAPE=[1,{len(devices)},1]"
        )
    dcn = config.dcn_mesh_shape
    if dcn is not None and math.prod(dcn) > 1 and hasattr(devices[0], "slice_index"):
        device_array = mesh_utils.create_hybrid_device_mesh(config.ici_mesh_shape, dcn, devices)
    else:
        try:
            device_array = mesh_utils.create_device_mesh(shape, devices)
        except (AssertionError, NotImplementedError, ValueError):
            # No known physical topology for this shape (e.g. virtual CPU devices): keep their order.
            device_array = np.asarray(devices).reshape(shape)
    return jax.sharding.Mesh(device_array, config.axis_names)
