"""The device mesh from Pax's ICI and DCN mesh shapes.

One ICI entry may be -1: it takes the devices left over once the other entries (and the DCN
shape) are accounted for, as MaxText's meshes do, so an experiment such as LmCloudSpmdTiny's
[1, -1, 1] runs data-parallel on 1 CPU or 8 GPUs unchanged.
"""

import dataclasses
import math
from typing import Optional, Sequence

import jax
import numpy as np
from jax.experimental import mesh_utils

from pax.errors import UsageError
from pax.experiments.config import MeshConfig


def resolve(config: MeshConfig, num_devices: int) -> MeshConfig:
    """`config` with a -1 in ICI_MESH_SHAPE replaced by the devices it stands for."""
    ici = config.ici_mesh_shape
    if ici is None or -1 not in ici:
        return config
    dcn = config.dcn_mesh_shape or (1,) * len(ici)
    known = math.prod(s for s in ici if s != -1) * math.prod(dcn)
    if num_devices % known:
        raise UsageError(
            f"ICI_MESH_SHAPE={list(ici)}: the other axes take {known} devices, which does not "
            f"divide the {num_devices} available"
        )
    ici = tuple(num_devices // known if s == -1 else s for s in ici)
    return dataclasses.replace(config, ici_mesh_shape=ici)


def mesh_shape(config: MeshConfig, num_devices: int) -> tuple[int, ...]:
    """The full mesh shape: ICI × DCN per axis; no ICI shape means data-parallel over all."""
    names = config.mesh_axis_names
    if config.ici_mesh_shape is None:
        shape = [1] * len(names)
        shape[names.index("data")] = num_devices
        return tuple(shape)
    ici = tuple(resolve(config, num_devices).ici_mesh_shape)
    dcn = tuple(config.dcn_mesh_shape or (1,) * len(ici))
    if len(ici) != len(names) or len(dcn) != len(ici):
        raise UsageError(
            f"ICI_MESH_SHAPE {list(ici)} and DCN_MESH_SHAPE {list(dcn)} must each have "
            f"{len(names)} entries, one per mesh axis {names}"
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
        free = ",".join("-1" if n == "data" else "1" for n in config.mesh_axis_names)
        raise UsageError(
            f"mesh {dict(zip(config.mesh_axis_names, shape))} needs {needed} devices but "
            f"{len(devices)} {devices[0].platform} device(s) are available; {fix}"
            f"override the mesh, e.g. --set 'ICI_MESH_SHAPE=[{free}]' (-1: the devices left over)"
        )
    dcn = config.dcn_mesh_shape
    ici = resolve(config, len(devices)).ici_mesh_shape
    if dcn is not None and math.prod(dcn) > 1 and hasattr(devices[0], "slice_index"):
        device_array = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices)
    else:
        try:
            device_array = mesh_utils.create_device_mesh(shape, devices)
        except (AssertionError, NotImplementedError, ValueError):
            # No known physical topology for this shape (e.g. virtual CPU devices): keep their order.
            device_array = np.asarray(devices).reshape(shape)
    return jax.sharding.Mesh(device_array, config.mesh_axis_names)
