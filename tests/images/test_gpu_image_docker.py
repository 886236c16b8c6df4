"""The GPU image proves itself on a CPU host: its own jax, CUDA plugin, CUDA wheels and XLA flags
compile the 1B model's FP8 step for an H100 into cuBLASLt FP8 GEMMs (pax.train.fp8_check
--target h100), without what its recipe leaves out, and the image stays under 6 GB.

It runs where the image exists: PAX_GPU_IMAGE, else the newest release's `pax:RELEASE-gpu`
(`./noxw -s build -- RELEASE gpu [--dev]` builds one; ~6 GB, so CI builds none itself)."""

import json
import os
import re

import pytest

from pax.images.engine import docker
from pax.releases import catalog
from pax.train import fp8_check
from tests.images.containers import needs_engine

IMAGE = os.environ.get("PAX_GPU_IMAGE") or f"pax:{catalog.newest().version}-gpu"
pytestmark = [needs_engine, pytest.mark.slow]  # slow: the 1B steps compile for minutes


@pytest.fixture(scope="module")
def gpu_image():
    if docker("image", "inspect", IMAGE, check=False).returncode != 0:
        pytest.skip(
            f"no image {IMAGE} in this engine: build it with ./noxw -s build -- "
            f"{catalog.newest().version} gpu [--dev] (set PAX_GPU_IMAGE to a dev image's tag)"
        )
    return IMAGE


def test_the_gpu_image_compiles_fp8_gemms_for_an_h100_on_a_cpu_host(gpu_image):
    r = docker(
        "run", "--rm", "--network", "none", "--entrypoint", "python", gpu_image,
        "-m", "pax.train.fp8_check", "--target", "h100",
        check=False, timeout=1500,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = re.search(
        rf"^{re.escape(fp8_check.F8_GEMM)}: (\d+) in the FP8 step, for its (\d+)", r.stdout, re.M
    )
    assert m and 1 <= int(m.group(1)) == int(m.group(2)), r.stdout
    # The image's own flags: the check printed them, and they keep Triton off the GEMMs.
    assert "--xla_gpu_enable_triton_gemm=false" in r.stdout


def test_the_gpu_image_is_its_lock_without_what_it_leaves_out_and_under_6_gb(gpu_image):
    check = docker(
        "run", "--rm", "--entrypoint", "python", gpu_image, "/opt/pax/verify_image_env.py"
    )
    # cuSOLVER by the name its CUDA major's lock pins: -cu12 up to CUDA 12, none from 13
    lock = docker("run", "--rm", "--entrypoint", "cat", gpu_image, "/opt/pax/lock.txt").stdout
    cusolver = "nvidia-cusolver-cu12" if "\nnvidia-cusolver-cu12==" in lock else "nvidia-cusolver"
    assert check.stdout.strip().endswith(f"left out: {cusolver}"), check.stdout
    env = docker("run", "--rm", "--entrypoint", "python", gpu_image, "-m", "pax", "env", "--json")
    desc = json.loads(env.stdout)
    assert desc["state"] == "exact" and desc["left_out"] == [cusolver]
    size = int(docker("image", "inspect", "-f", "{{.Size}}", gpu_image).stdout)
    assert size < 6e9, f"{gpu_image} is {size / 1e9:.2f} GB"
