"""What `./noxw -s aot` prints: parameter counts in units that fit, and no libtpu complaint about
the slice a host without chips belongs to (pax.aot)."""

import os

import pytest

from pax import aot


@pytest.mark.parametrize(
    "n, shown",
    [
        (16_506_101_504, "16.51B"),
        (164_000_000, "0.16B"),
        (3_221_504, "3.22M"),
        (55_000, "55.00K"),
        (99, "99"),
    ],
)
def test_a_count_is_shown_in_the_unit_that_fits(n, shown):
    assert aot.count(n) == shown


def test_a_host_without_chips_is_one_worker_to_libtpu(monkeypatch):
    from jax._src import hardware_utils

    for name in ("TPU_WORKER_HOSTNAMES", "TPU_ACCELERATOR_TYPE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(hardware_utils, "num_available_tpu_chips_and_device_id", lambda: (4, 5))
    aot._one_worker_without_chips()  # a TPU host: libtpu learns its slice as it always does
    assert "TPU_WORKER_HOSTNAMES" not in os.environ
    monkeypatch.setattr(hardware_utils, "num_available_tpu_chips_and_device_id", lambda: (0, None))
    aot._one_worker_without_chips()
    assert os.environ["TPU_WORKER_HOSTNAMES"] == "localhost"
    assert os.environ["TPU_ACCELERATOR_TYPE"] == "v5litepod-1"
