"""The platform a model is traced for: what its `auto` settings (ATTENTION_KERNEL, CPU_KERNELS)
resolve against.

That is the platform of the mesh's devices, else jax's default backend. A compile from this
host for another platform's devices (pax.aot, the GPU checks) traces inside `target`, which
also covers a model without a mesh (pmap), so the plan is the program the target would run.
"""

import contextlib
import contextvars

import jax

_TARGET = contextvars.ContextVar("pax_target_platform", default=None)


def current(mesh=None) -> str:
    """The platform's name ("cpu", "gpu", "tpu"): the target's, else the mesh devices', else
    the default backend's."""
    if mesh is None:
        return _TARGET.get() or jax.default_backend()
    return _TARGET.get() or mesh.devices.flat[0].platform


@contextlib.contextmanager
def target(devices):
    """Trace for `devices`' platform (compile-only devices of a TPU or GPU topology included)."""
    token = _TARGET.set(devices[0].platform)
    try:
        yield
    finally:
        _TARGET.reset(token)
