import types

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from pax.models import platform


def _devices(name):
    return [types.SimpleNamespace(platform=name)]


def test_the_platform_is_the_meshs_unless_a_target_is_given():
    mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
    assert platform.current() == jax.default_backend() == "cpu"
    assert platform.current(mesh) == "cpu"
    with platform.target(_devices("tpu")):
        assert platform.current() == platform.current(mesh) == "tpu"
        with platform.target(_devices("gpu")):
            assert platform.current(mesh) == "gpu"
        assert platform.current(mesh) == "tpu"
    assert platform.current(mesh) == "cpu"


def test_a_failed_trace_does_not_leave_its_target_set():
    with pytest.raises(RuntimeError), platform.target(_devices("tpu")):
        raise RuntimeError("lowering failed")
    assert platform.current() == "cpu"
