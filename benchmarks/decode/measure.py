"""The decode benchmark's runs: the cached generator and the recompute loop timed on the same
prompts, beside the predictions and the memory accounting; and their report."""

import dataclasses
import tempfile
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from benchmarks import figures
from benchmarks.decode.memory import memory, memory_report, restored_variables
from benchmarks.decode.predict import predicted_roofline, predicted_speedup
from benchmarks.decode.recompute import BUCKET, Recompute
from benchmarks.decode.sizes import parameter_bytes, step_bytes
from pax.decode import prompts as prompts_lib
from pax.decode.generate import Generator, decode_model, unscan
from pax.decode.sampling import Sampling
from pax.parallel import sharding
from pax.tasks.lm.params.lm_cloud import LmCloudSpmdTiny
from pax.train import mfu


class DecodeBenchLm(LmCloudSpmdTiny):
    """Small enough for the recompute side to finish on a CPU; SEQ_LEN only bounds positions."""

    NUM_LAYERS = 2
    MODEL_DIMS = 256
    HIDDEN_DIMS = 1024
    NUM_HEADS = 4
    SEQ_LEN = 2048


class SmallDecodeBenchLm(DecodeBenchLm):
    NUM_LAYERS = 1
    MODEL_DIMS = 64
    HIDDEN_DIMS = 128
    NUM_HEADS = 2


def measure_read_bandwidth(mib: int = 256, repeats: int = 5) -> float:
    """Best-of-`repeats` bytes/s of summing a float32 buffer of `mib` MiB (far larger than the
    CPU's caches at the default): how fast a step can stream its cache."""
    a = jnp.ones((mib * 2**20 // 4,), jnp.float32)
    total = jax.jit(jnp.sum)
    total(a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        total(a).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return a.nbytes / best


@dataclasses.dataclass
class _Setup:
    """What every run shares: the model, its weights in each layout, the prompts, the device's
    measured peak and read bandwidth."""

    cfg: object
    mesh: Mesh
    model: object
    variables: dict  # as initialized (the recompute side's)
    restored: dict  # read back as --mode=decode reads a checkpoint
    decoded: dict  # `restored` laid out unrolled, as pax.decode.decoder does once
    prompt_batch: object
    batch: int
    peak: float
    bandwidth: float
    repeats: int


def measure(
    small: bool = False, repeats: int = 3, batch: int = 16, prompt_len: int = 48, news=None
) -> dict:
    """news: the numbers of new tokens to time (default (128, 1024), small (8, 32))."""
    experiment = SmallDecodeBenchLm if small else DecodeBenchLm
    cfg = experiment().task().model
    news = news or ((8, 32) if small else (128, 1024))
    device = jax.devices()[0]
    mesh = Mesh(np.asarray([device]).reshape(1, 1, 1), ("replica", "data", "mdl"))
    model = decode_model(cfg)
    tokens = jnp.zeros((1, 8), jnp.int32)
    variables = {"params": nn.unbox(jax.jit(model.init)(jax.random.key(0), tokens)["params"])}
    rng = np.random.default_rng(0)
    prompts = [
        prompts_lib.Prompt(str(i), rng.integers(1, cfg.vocab_size, prompt_len).astype(np.int32))
        for i in range(batch)
    ]
    ((_, prompt_batch),) = prompts_lib.batches(prompts, batch, 1, cfg.seq_len)
    with tempfile.TemporaryDirectory() as directory:
        restored = restored_variables(variables, mesh, directory)
    # Laid out as pax.decode.decoder lays out a checkpoint, once.
    decoded = jax.jit(lambda v: unscan(v, cfg.num_layers))(restored)
    peak = mfu.measure_matmul_peak(cfg.fprop_dtype)
    bandwidth = measure_read_bandwidth(64 if small else 256)
    setup = _Setup(
        cfg,
        mesh,
        model,
        variables,
        restored,
        decoded,
        prompt_batch,
        batch,
        peak,
        bandwidth,
        repeats,
    )
    # The stacked layout's cost and the real recompute loop are timed once, at the shorter length.
    rows = [_run(setup, new, first=new == news[0]) for new in news]
    return {
        "device": f"{device.platform}: {device.device_kind}",
        "config": {
            "layers": cfg.num_layers,
            "model_dims": cfg.model_dims,
            "hidden_dims": cfg.hidden_dims,
            "heads": cfg.num_heads,
            "batch": batch,
            "prompt_tokens": prompt_len,
            "prompt_bucket": prompt_batch.tokens.shape[1],
            "recompute_bucket": BUCKET,
            "dtype": cfg.fprop_dtype,
        },
        "peak_flops": peak,
        "read_bandwidth": bandwidth,
        "parameter_bytes": parameter_bytes(cfg),
        "runs": rows,
    }


def _run(s: _Setup, new: int, first: bool) -> dict:
    """Both sides generating `new` tokens, timed, with the predictions and the memory."""
    cfg, batch, prompt_bucket = s.cfg, s.batch, s.prompt_batch.tokens.shape[1]
    replicated = jax.tree.map(lambda _: sharding.replicated(s.mesh), s.decoded)
    generator = Generator(cfg, s.mesh, replicated, new, Sampling("greedy"))
    generator(s.decoded, s.prompt_batch, seed=0)  # compile
    cached_s = []
    for _ in range(s.repeats):
        start = time.perf_counter()
        out = generator(s.decoded, s.prompt_batch, seed=0)
        cached_s.append(time.perf_counter() - start)
    recompute = Recompute(s.model, s.variables, s.prompt_batch, new)
    per_bucket = {
        length: recompute.step_seconds(length, s.repeats) for length in set(recompute.lengths())
    }
    recompute_s = sum(per_bucket[length] for length in recompute.lengths())
    row = {
        "new_tokens": new,
        "cached_s": figures.spread(cached_s),
        "recompute_s": recompute_s,
        "recompute_step_s_by_length": {str(k): v for k, v in sorted(per_bucket.items())},
        **predicted_speedup(cfg, batch, prompt_bucket, new),
        **predicted_roofline(cfg, batch, prompt_bucket, new, s.peak, s.bandwidth),
        "cached_step_bytes": step_bytes(cfg, batch, 1, prompt_bucket + new),
        "memory": memory(cfg, s.mesh, s.restored, s.prompt_batch, new, s.repeats if first else 0),
    }
    if first:  # the real loop once, against the per-bucket sum
        recompute.run()  # compiled already; this one warms the loop's own dispatch
        start = time.perf_counter()
        recomputed = recompute.run()
        row["recompute_loop_s"] = time.perf_counter() - start
        row["same_tokens"] = bool(np.array_equal(recomputed, out.tokens))
    cached = row["cached_s"]["median"]
    row["measured_speedup"] = recompute_s / cached
    row["measured_over_predicted"] = row["measured_speedup"] / row["speedup"]
    row["measured_over_roofline"] = row["measured_speedup"] / row["roofline_speedup"]
    row["cached_roofline_over_measured"] = row["cached_roofline_s"] / cached
    row["recompute_roofline_over_measured"] = row["recompute_roofline_s"] / recompute_s
    row["cached_tokens_per_s"] = batch * new / cached
    row["recompute_tokens_per_s"] = batch * new / recompute_s
    return row


def report(r: dict) -> str:
    c = r["config"]
    lines = [
        f"decode       {c['layers']} layers x {c['model_dims']} dims, {c['heads']} heads, batch "
        f"{c['batch']}, prompts of {c['prompt_tokens']} tokens (bucket {c['prompt_bucket']}), "
        f"greedy, {c['dtype']}, {r['device']}",
        f"decode       roofline: matmul peak {r['peak_flops'] / 1e9:.0f} GFLOP/s, read bandwidth "
        f"{r['read_bandwidth'] / 1e9:.1f} GB/s (both measured now); parameters "
        f"{r['parameter_bytes'] / 1e6:.1f} MB",
    ]
    for row in r["runs"]:
        check = ""
        if "recompute_loop_s" in row:
            check = (
                f"; real recompute loop {row['recompute_loop_s']:.3g} s, same tokens: "
                f"{'yes' if row['same_tokens'] else 'NO'}"
            )
        lines.append(
            f"decode {row['new_tokens']:>5} new: cached {row['cached_tokens_per_s']:.0f} tokens/s "
            f"({row['cached_s']['median']:.3g} s), recompute {row['recompute_tokens_per_s']:.0f} "
            f"tokens/s ({row['recompute_s']:.3g} s{check}); speed-up {row['measured_speedup']:.1f}x "
            f"vs {row['speedup']:.1f}x predicted by FLOPs = {row['measured_over_predicted']:.2f} "
            "(target 0.5..2)"
        )
        lines += memory_report(row["new_tokens"], row["memory"])
        lines.append(
            f"decode {row['new_tokens']:>5} new: roofline (cached step reads "
            f"{row['cached_step_bytes'] / 1e6:.1f} MB) predicts {row['roofline_speedup']:.1f}x: "
            f"measured / roofline = {row['measured_over_roofline']:.2f} (target 0.5..2); each "
            f"side's roofline / measured time: cached {row['cached_roofline_over_measured']:.2f}, "
            f"recompute {row['recompute_roofline_over_measured']:.2f}"
        )
    return "\n".join(lines)
