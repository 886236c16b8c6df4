"""GPUs to compile for without one: XLA's description of each device, and compile-only devices.

Each `<name>.txtpb` beside this file is a `stream_executor.GpuTargetConfigProto` in text form,
what XLA's GPU compiler reads of a device (SM count and limits, caches, memory, compute
capability): `h100` and `a100` are XLA's own (openxla/xla, xla/tools/hlo_opt/gpu_specs/), `h200`
is the H100's with the H200 data sheet's memory. The software half of the description, cuDNN's
and the CUDA runtime's versions, is read from the installed NVIDIA wheels, as the CUDA plugin
would read it on the machine.

`devices(target, n)` gives n compile-only devices of that GPU, 8 per node, from jax's
`topologies.get_topology_desc(platform="cuda", ...)`: jax compiles for them with the CUDA
compiler of its plugin (jax-cuda13-plugin, or jax-cuda12-plugin in the releases on Python 3.11),
on a CPU machine. The process must start with
JAX_PLATFORMS=cpu and JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 (`compile_only`): there is no
driver to open or to check the CUDA libraries against.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import math
import os
import re
import sys
from pathlib import Path

from pax.errors import UsageError

HERE = Path(__file__).resolve().parent
GPUS_PER_NODE = 8
# FP8 tensor cores: Ada (8.9) and Hopper (9.0) onwards.
FP8_CAPABILITY = (8, 9)
# What the plugin needs to start with no GPU: the CPU backend, and no check of CUDA libraries
# against a driver that is not there.
COMPILE_ONLY_ENV = {"JAX_PLATFORMS": "cpu", "JAX_SKIP_CUDA_CONSTRAINTS_CHECK": "1"}


@dataclasses.dataclass(frozen=True)
class CudaPlugin:
    """jax's CUDA plugin of one CUDA major, and the NVIDIA wheels it reads versions from."""

    module: str
    package: str
    cudnn: str
    runtime: str


# Newest first: NVIDIA names its CUDA 13 wheels without the -cu12 suffix (cuDNN keeps one).
CUDA_PLUGINS = (
    CudaPlugin(
        "jax_plugins.xla_cuda13", "jax-cuda13-plugin", "nvidia-cudnn-cu13", "nvidia-cuda-runtime"
    ),
    CudaPlugin(
        "jax_plugins.xla_cuda12",
        "jax-cuda12-plugin",
        "nvidia-cudnn-cu12",
        "nvidia-cuda-runtime-cu12",
    ),
)


def cuda_plugin() -> CudaPlugin | None:
    """The CUDA plugin installed here, or None."""
    if importlib.util.find_spec("jax_plugins") is None:
        return None
    return next((p for p in CUDA_PLUGINS if importlib.util.find_spec(p.module)), None)


class NoCudaCompiler(UsageError):
    """jax's CUDA plugin is not installed here: nothing compiles for a GPU."""


@dataclasses.dataclass(frozen=True)
class GpuTarget:
    name: str  # the file's stem: h100, h200, a100
    text: str  # the GpuTargetConfigProto's text, as kept in the repository

    def _field(self, pattern: str) -> str:
        return re.search(pattern, self.text).group(1)

    @property
    def device(self) -> str:
        return self._field(r'device_description_str: "([^"]+)"')

    @property
    def memory_bytes(self) -> int:
        return int(self._field(r"device_memory_size: (\d+)"))

    @property
    def sms(self) -> int:
        return int(self._field(r"core_count: (\d+)"))

    @property
    def compute_capability(self) -> tuple[int, int]:
        block = self._field(r"cuda_compute_capability \{([^}]*)\}")
        major, minor = (re.search(rf"{k}: (\d+)", block) for k in ("major", "minor"))
        return int(major.group(1)) if major else 0, int(minor.group(1)) if minor else 0

    @property
    def fp8(self) -> bool:
        return self.compute_capability >= FP8_CAPABILITY

    def describe(self) -> str:
        major, minor = self.compute_capability
        return (
            f"{self.name} ({self.device}: compute capability {major}.{minor}, {self.sms} SMs, "
            f"{self.memory_bytes / 2**30:.1f} GiB)"
        )

    def target_config(self) -> str:
        """The text get_topology_desc takes: the device, and the installed cuDNN and CUDA
        runtime's versions."""
        plugin = cuda_plugin()
        wheels = (("dnn_version_info", plugin.cudnn), ("runtime_version", plugin.runtime))
        extra = [
            f"{field} {{ {_version_fields(version)} }}"
            for field, wheel in (wheels if plugin else ())
            if (version := _installed(wheel))
        ]
        return "\n".join([self.text, *extra]) + "\n"


def names() -> list[str]:
    return sorted(p.stem for p in HERE.glob("*.txtpb"))


def get(name: str) -> GpuTarget:
    path = HERE / f"{name.lower()}.txtpb"
    if not path.is_file():
        raise UsageError(f"unknown GPU {name!r}; one of {', '.join(names())}")
    return GpuTarget(path.stem, path.read_text())


def nodes(n: int) -> int:
    return math.ceil(n / GPUS_PER_NODE)


def topology(n: int) -> str:
    """get_topology_desc's `slices x hosts x devices per host` for n GPUs, 8 per node."""
    if n > GPUS_PER_NODE and n % GPUS_PER_NODE:
        raise UsageError(
            f"{n} GPUs do not fill nodes of {GPUS_PER_NODE}; change the mesh to a multiple of "
            f"{GPUS_PER_NODE} (or at most {GPUS_PER_NODE}, one node)"
        )
    return f"1x{nodes(n)}x{min(n, GPUS_PER_NODE)}"


def compile_only() -> None:
    """Make this process compile for GPUs without one: COMPILE_ONLY_ENV, set before jax is
    imported (or already set where it was); NoCudaCompiler where the plugin is not installed."""
    if cuda_plugin() is None:
        raise NoCudaCompiler(
            "jax's CUDA plugin (jax-cuda13-plugin or jax-cuda12-plugin) is not installed here, "
            "so nothing compiles "
            "for a GPU; run in the release's gpu env (ci/gpu_check.sh RELEASE -- ARGS builds it)"
        )
    if "jax" not in sys.modules:
        os.environ.update(COMPILE_ONLY_ENV)
    unset = [f"{k}={v}" for k, v in COMPILE_ONLY_ENV.items() if os.environ.get(k) != v]
    if unset:
        raise UsageError(f"compiling for a GPU without one needs {' '.join(unset)} set before jax")


def devices(target: GpuTarget, n: int) -> list:
    """n compile-only devices of the target, 8 per node (jax imported)."""
    from jax.experimental import topologies

    compile_only()
    found = topologies.get_topology_desc(
        platform="cuda", target_config=target.target_config(), topology=topology(n)
    ).devices
    return list(found)


def _installed(wheel: str) -> str | None:
    try:
        return importlib.metadata.version(wheel)
    except importlib.metadata.PackageNotFoundError:
        return None


def _version_fields(version: str) -> str:
    parts = [int(p) for p in re.findall(r"\d+", version)[:3]]
    return " ".join(f"{k}: {v}" for k, v in zip(("major", "minor", "patch"), parts))
