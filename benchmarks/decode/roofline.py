"""Decoding against the memory roofline: `python -m benchmarks.decode --roofline`.

A cached decode step must read every parameter and the whole KV cache buffer (keys, values,
slot positions and segment ids of every layer: `sizes.step_bytes`); at the device's memory
bandwidth that is the least time a step can take. Its fraction of the roofline is that least
time over the step's measured time (1.0: the step runs at the bandwidth).

It times pax.decode's generator alone (greedy, no end of sequence, one device) at the
accelerator bench's 0.55B shapes (benchmarks/tpu_bench.py: C4Spmd1BAdam4Replicas with 6 layers,
bf16 activations, the weights as initialized) for each batch: `new` tokens after prompts of
`prompt` tokens, and one token after the same prompts. Both include the prefill, so a decode
step's time is their difference over new - 1.

The bandwidth is the data sheet's HBM bandwidth for the device kind where this table has it;
elsewhere (a CPU) it is the read bandwidth measured in the same run (a sum over a buffer far
larger than the caches), and the record says which figure it used.
"""

import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from benchmarks import figures
from benchmarks.decode.measure import measure_read_bandwidth
from benchmarks.decode.sizes import parameter_bytes, step_bytes
from benchmarks.tpu_bench import DRY_RUN_SHAPE, EXPERIMENT, SHAPE
from pax.decode import prompts as prompts_lib
from pax.decode.generate import Generator, decode_model, unscan
from pax.decode.sampling import Sampling
from pax.parallel import sharding
from pax.train import compiled_step, mfu

# HBM bandwidth per chip from the vendors' data sheets, bytes/s (Cloud TPU's system
# architecture pages; NVIDIA's H100 SXM and H200 data sheets).
HBM_BANDWIDTH_BY_DEVICE_KIND = {
    "TPU v4": 1200e9,
    "TPU v5 lite": 819e9,
    "TPU v5e": 819e9,
    "TPU v5p": 2765e9,
    "TPU v6 lite": 1640e9,
    "TPU v6e": 1640e9,
    "H100": 3.35e12,
    "H200": 4.8e12,
}


def bandwidth(device) -> dict:
    """The bandwidth a step is held against, and where the figure comes from."""
    sheet = mfu.table_peak(device.device_kind, HBM_BANDWIDTH_BY_DEVICE_KIND)
    if sheet is not None and device.platform != "cpu":
        return {"bytes_per_s": sheet, "source": f"data sheet: HBM of a {device.device_kind}"}
    mib = 256
    return {
        "bytes_per_s": measure_read_bandwidth(mib),
        "source": f"measured: best of 5 sums over {mib} MiB of float32 (no data sheet for "
        f"{device.platform}: {device.device_kind})",
    }


def _seconds(generator, variables, prompts, repeats: int) -> list:
    generator(variables, prompts, seed=0)  # compiles
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        generator(variables, prompts, seed=0)  # returns host arrays: the work is done
        times.append(time.perf_counter() - start)
    return times


def run(cfg, mesh, variables, batch: int, prompt: int, new: int, bw: float, repeats: int):
    """One batch size: the generator's times, a decode step's time, its bytes and fraction."""
    rng = np.random.default_rng(0)
    ids = [rng.integers(1, cfg.vocab_size, prompt).astype(np.int32) for _ in range(batch)]
    prompts = [prompts_lib.Prompt(str(i), p) for i, p in enumerate(ids)]
    ((_, prompt_batch),) = prompts_lib.batches(prompts, batch, 1, cfg.seq_len)
    shardings = jax.tree.map(lambda _: sharding.replicated(mesh), variables)
    greedy = Sampling("greedy")
    whole = _seconds(Generator(cfg, mesh, shardings, new, greedy), variables, prompt_batch, repeats)
    first = _seconds(Generator(cfg, mesh, shardings, 1, greedy), variables, prompt_batch, repeats)
    # The fastest of each is the least disturbed by other work on the machine; medians of a
    # few samples on a busy host can put the difference below zero.
    step_s = (min(whole) - min(first)) / (new - 1)
    if step_s <= 0:
        raise RuntimeError(
            f"decode: {new} tokens took no longer than 1 ({min(whole):.4f} s vs "
            f"{min(first):.4f} s): the host is too busy to time a step; rerun with more "
            "--new tokens or --repeats"
        )
    span = prompt_batch.tokens.shape[1] + new  # the cache buffer every step attends over
    nbytes = step_bytes(cfg, batch, 1, span)
    return {
        "batch": batch,
        "prompt_tokens": prompt,
        "prompt_bucket": prompt_batch.tokens.shape[1],
        "new_tokens": new,
        "generate_s": figures.spread(whole),
        "prefill_and_one_s": figures.spread(first),
        "step_s": step_s,
        "tokens_per_s": batch / step_s,
        "generate_tokens_per_s": batch * new / figures.spread(whole)["median"],
        "step_bytes": nbytes,
        "roofline_step_s": nbytes / bw,
        "roofline_fraction": nbytes / bw / step_s,
    }


def measure(small: bool, batches, prompt: int, new: int, repeats: int) -> dict:
    """Every batch size at the bench shapes (small: tpu_bench's dry-run shapes)."""
    shape = DRY_RUN_SHAPE if small else SHAPE
    cfg = compiled_step.one_device(EXPERIMENT, 1, **shape).task().model
    device = jax.devices()[0]
    mesh = Mesh(np.asarray([device]).reshape(1, 1, 1), ("replica", "data", "mdl"))
    model = decode_model(cfg)
    init = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))
    variables = jax.jit(lambda v: unscan(v, cfg.num_layers))({"params": nn.unbox(init["params"])})
    bw = bandwidth(device)
    runs = [run(cfg, mesh, variables, b, prompt, new, bw["bytes_per_s"], repeats) for b in batches]
    return {
        "kind": "decode",
        "device": f"{device.platform}: {device.device_kind}",
        "model": {
            "experiment": EXPERIMENT,
            "overrides": shape,
            "layers": cfg.num_layers,
            "model_dims": cfg.model_dims,
            "heads": cfg.num_heads,
            "vocab": cfg.vocab_size,
            "dtype": cfg.fprop_dtype,
            "parameter_bytes": parameter_bytes(cfg),
        },
        "bandwidth": bw,
        "repeats": repeats,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "jax": jax.__version__,
        "runs": runs,
    }


def report(r: dict) -> str:
    m, bw = r["model"], r["bandwidth"]
    lines = [
        f"decode roofline  {m['layers']} x {m['model_dims']}, {m['heads']} heads, vocab "
        f"{m['vocab']}, {m['dtype']}; parameters {m['parameter_bytes'] / 1e6:.1f} MB; "
        f"{r['device']}; bandwidth {bw['bytes_per_s'] / 1e9:.1f} GB/s ({bw['source']})"
    ]
    for x in r["runs"]:
        lines.append(
            f"decode roofline  batch {x['batch']:3d}, prompt {x['prompt_tokens']}, "
            f"{x['new_tokens']} new: step {x['step_s'] * 1e3:.3f} ms = "
            f"{x['tokens_per_s']:.0f} tokens/s ({x['generate_tokens_per_s']:.0f} with the "
            f"prefill); a step reads {x['step_bytes'] / 1e6:.1f} MB: roofline "
            f"{x['roofline_step_s'] * 1e3:.3f} ms, fraction {x['roofline_fraction']:.2f}"
        )
    return "\n".join(lines)
