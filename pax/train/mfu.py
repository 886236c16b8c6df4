"""Model FLOPs per step (analytic) and the device's peak, for MFU.

Forward FLOPs per token, counting 2 per multiply-add of every matmul:
  per layer  2·E·(H + 2K)·D      fused QKV projection (K kv heads, D dims per head)
           + 2·H·D·E             attention output projection
           + 4·T·H·D             Q·Kᵀ and probs·V over the full length T (causal half not
                                 subtracted; causal_half=True halves it, as MaxText counts:
                                 maxtext_utils.calculate_tflops_training_per_device)
           + 2·E·F·(2 if gated else 1) + 2·F·E      FFN
  once       2·E·V               softmax projection
Training FLOPs = 3 × forward (the backward pass is twice the forward); rematerialization is not
counted, as is usual for MFU. MFU = FLOPs per step / step time / peak FLOP/s of all devices.
"""

import functools
import math
import os
import time

import jax
import jax.numpy as jnp

from pax.errors import UsageError
from pax.experiments.config import ModelConfig
from pax.models.feed_forward import GATED

# Dense bf16 peak per chip, from the vendors' data sheets.
PEAK_FLOPS_BY_DEVICE_KIND = {
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v5p": 459e12,
    "TPU v5": 459e12,
    "TPU v6 lite": 918e12,
    "TPU v6e": 918e12,
    "A100": 312e12,
    "H100": 989e12,
    "H200": 989e12,
}


def flops_per_token(c: ModelConfig, seq_len: int, causal_half: bool = False) -> float:
    e, f, h, k, d = c.model_dims, c.hidden_dims, c.num_heads, c.num_kv_heads, c.dims_per_head
    ffn_in = 2 if c.activation in GATED else 1
    layer = (
        2 * e * (h + 2 * k) * d
        + 2 * h * d * e
        + 4 * seq_len * h * d / (2 if causal_half else 1)
        + 2 * e * f * ffn_in
        + 2 * f * e
    )
    return 3.0 * (c.num_layers * layer + 2 * e * c.vocab_size)


def flops_per_step(c: ModelConfig, batch: int, causal_half: bool = False) -> float:
    """The MFU numerator: model FLOPs of one train step over `batch` rows of seq_len (with
    causal_half, the attention's score and value matmuls over half the length)."""
    return flops_per_token(c, c.seq_len, causal_half) * batch * c.seq_len


def table_peak(device_kind: str, table: dict = PEAK_FLOPS_BY_DEVICE_KIND):
    """The `table`'s figure for a device kind (default: its dense bf16 FLOP/s), or None."""
    # Longest key first, so 'TPU v5 lite' wins over 'TPU v5'.
    for kind in sorted(table, key=len, reverse=True):
        if kind.lower() in device_kind.lower():
            return table[kind]
    return None


def measure_matmul_peak(dtype="float32", n: int = 2048, repeats: int = 5) -> float:
    """Best-of-`repeats` FLOP/s of one n×n matmul on the default device."""
    a = jnp.ones((n, n), dtype)
    matmul = jax.jit(lambda x, y: x @ y)
    matmul(a, a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, a).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


# A run's MFU denominator on CPU: the host does not change within a process, and each
# measurement costs seconds (the benchmarks measure afresh each round instead).
_host_matmul_peak = functools.cache(measure_matmul_peak)

# The host's peak given rather than measured, per dtype ("float32=1.9e11 bfloat16=6e10"): a run
# starts two seconds sooner, and runs on one machine share one MFU denominator.
GIVEN_PEAK = "PAX_CPU_PEAK_FLOPS"


def given_peaks(text: str) -> dict[str, float]:
    """GIVEN_PEAK's value as {dtype: FLOP/s}; UsageError naming what is wrong."""
    peaks = {}
    for item in text.split():
        dtype, _, figure = item.partition("=")
        try:
            peaks[dtype] = float(figure)
        except ValueError:
            peaks[dtype] = math.nan
        if dtype not in ("float32", "bfloat16") or not 0 < peaks[dtype] < math.inf:
            raise UsageError(
                f"{GIVEN_PEAK}={text!r}: {item!r} is not DTYPE=FLOP/s with DTYPE float32 or "
                f"bfloat16 and a positive figure; e.g. {GIVEN_PEAK}='float32=1.9e11', or unset it"
            )
    return peaks


def peak_flops(devices, dtype: str) -> dict:
    """Peak FLOP/s of the whole set of devices, and where the figure came from.

    On CPU all (virtual) devices share the host's cores, so the peak is measured once for the
    host, not multiplied by the device count, unless GIVEN_PEAK gives it for the dtype.
    """
    kind = devices[0].device_kind
    per_device = table_peak(kind)
    cpu = devices[0].platform == "cpu"
    if cpu and (given := given_peaks(os.environ.get(GIVEN_PEAK, "")).get(dtype)):
        return {"flops": given, "source": f"given: {GIVEN_PEAK}", "device_kind": kind}
    if cpu or per_device is None:
        return {
            "flops": _host_matmul_peak(dtype),
            "source": f"measured: best of 5 2048x2048 {dtype} matmuls on {kind}",
            "device_kind": kind,
        }
    return {
        "flops": per_device * len(devices),
        "source": "table: dense bf16 per chip",
        "device_kind": kind,
    }
