"""Decoding speed: the KV cache against recomputing the whole prefix for every new token.

Both decode the same left-padded batch of prompts greedily on one device:

- cached: pax.decode's generator, the one the decode modes run: the prompt is prefilled in one
  pass, then each step feeds one token per row and attends over the cache (one jitted while
  loop; compilation is excluded by a warm-up call). Timed end to end, median of the repeats.
- recompute: every step runs the model over the whole sequence so far and takes the last
  position's logits. The sequence is padded up to a multiple of BUCKET tokens, so the step
  compiles once per bucket instead of once per length (the padding comes after the last real
  token: causal attention makes it invisible). A step's time depends only on its bucket, so the
  loop's time is the sum over its steps of the measured time of one step at that step's bucket
  (median of the repeats); at the shorter length the real loop also runs end to end, and its
  time is printed beside that sum as a check of the method.

The predicted speed-up is the ratio of the two computations' forward FLOPs (pax.train.mfu's
per-token count, which includes attention over the span each token attends to): the cached
path attends over the whole cache buffer (prompt bucket + new tokens) at every step, the
recompute path over its bucket. The claim checked: measured / predicted within [0.5, 2].

FLOPs alone cannot be matched by a cached step: it does ~1 flop per 2 bytes of cache it reads
(one multiply-add per f32 key or value element), so it runs at the memory's speed, not the
matmul peak. A second prediction is the roofline: each step, of either side, takes at least
max(FLOPs / peak FLOP/s, bytes / read bandwidth), with the peak (an n x n matmul) and the
bandwidth (a sum over a buffer far larger than the caches) measured in the same run, and the
bytes the least a step must move (`step_bytes`): every parameter once, plus for a cached step
the whole cache buffer (keys, values, slot positions and segment ids of every layer), for a
recompute step the keys and values of its own sequence, written and read once (its attention
scores could stay on chip, so they are not counted: this favours the recompute side). The
claim checked beside the first: measured / roofline-predicted speed-up within [0.5, 2]; each
side's roofline time over its measured time is printed too (how close each runs to its floor).

Memory, from XLA's own accounting of the compiled generator (`memory_analysis()`: arguments,
outputs, temporaries, aliased bytes; its peak is arguments + outputs + temporaries - aliased,
the temporaries being one buffer that XLA's assignment sizes for the most bytes live at once),
next to what decoding needs by hand: the parameters (the arguments: decode restores nothing
else), the cache buffer, and the activations (`activation_bytes`, an upper bound). Where the
device reports its own peak (`memory_stats()`, not on CPU), that is printed too. Two copies are
priced: the stacked weights sliced into per-layer arrays on every call (`unscan`), by compiling
and timing the same generator on weights laid out unrolled beforehand, and a decode step's
copy of the cache, by the temporaries of one compiled step (a copy needs the cache's bytes).
"""

import argparse
import dataclasses
import functools
import json
import os
import statistics
import tempfile
import time
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import Mesh

from pax.checkpoint.manager import step_name
from pax.decode import prompts as prompts_lib
from pax.decode.generate import Generator, decode_model, decode_step, unscan
from pax.decode.run import restore_parts
from pax.decode.sampling import Sampling
from pax.models import kv_cache
from pax.models.feed_forward import GATED
from pax.parallel import sharding
from pax.tasks.lm.params.lm_cloud import LmCloudSpmdTiny
from pax.train import mfu

BUCKET = 64


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


def _forward_flops(cfg, tokens: int, span: int) -> float:
    """Forward FLOPs of `tokens` tokens each attending over `span` slots."""
    return tokens * mfu.flops_per_token(cfg, span) / 3.0  # flops_per_token counts training: 3x


def _dims(cfg) -> tuple:
    """(model, hidden, heads, kv heads, dims per head, FFN input projections) of `cfg`."""
    ffn_in = 2 if cfg.activation in GATED else 1
    return (
        cfg.model_dims,
        cfg.hidden_dims,
        cfg.num_heads,
        cfg.num_kv_heads,
        cfg.dims_per_head,
        ffn_in,
    )


def parameter_bytes(cfg) -> int:
    """Bytes of the parameters one forward step reads: all of them, once (the embedding table
    is the softmax weight as well unless SEPARATE_EMBEDDING; a learned position table is read
    only at the step's positions, so it is left out)."""
    e, f, h, k, d, ffn_in = _dims(cfg)
    layer = e * (h + 2 * k) * d + h * d * e + e * f * ffn_in + f * e + 4 * e  # + 2 norms
    layer += (f * ffn_in + e) if cfg.ffn_has_bias else 0
    layer += ((h + 2 * k) * d + e) if cfg.use_bias else 0
    layer += d if cfg.per_dim_scale else 0
    once = cfg.vocab_size * e * (2 if cfg.separate_embedding else 1) + 2 * e  # + final norm
    once += cfg.vocab_size if cfg.softmax_has_bias else 0
    return (cfg.num_layers * layer + once) * np.dtype(cfg.param_dtype).itemsize


def cache_bytes(cfg, batch: int, length: int) -> int:
    """Bytes of a KV cache buffer of `length` slots (pax.models.kv_cache): every layer's keys
    and values (fprop dtype) and its own int32 slot positions and segment ids."""
    kv = 2 * batch * length * cfg.num_kv_heads * cfg.dims_per_head
    kv *= np.dtype(cfg.fprop_dtype).itemsize
    return cfg.num_layers * (kv + 2 * batch * length * 4)


def activation_bytes(cfg, batch: int, length: int, span: int, new: int) -> int:
    """What decoding's intermediates need at most: the prefill's (`length` tokens per row
    attending over `span` slots, the largest call) and the loop's state (`new` drawn tokens and
    one row of logits per row). Layers run one after another, and within a layer attention,
    then the FFN, then (after the last) the output logits: the bound is the largest of these
    stages' buffers, each counted with the residual stream and as if all live at once
    (attention: the residual's norm, fused QKV, scores and probabilities, its output; FFN:
    the norm, its input(s) and activation; output: the logits and their capped form)."""
    e, f, h, k, d, ffn_in = _dims(cfg)
    attention = 2 * e + (h + 2 * k) * d + 2 * h * span + h * d
    ffn = 2 * e + (ffn_in + 1) * f
    output = e + 2 * cfg.vocab_size
    prefill = batch * length * max(attention, ffn, output)
    prefill *= np.dtype(cfg.fprop_dtype).itemsize
    return prefill + batch * new * 4 + batch * cfg.vocab_size * 4


def compiled_memory(jitted, *args) -> dict:
    """XLA's byte counts for `jitted` compiled for `args` (arrays or shape structs)."""
    m = jitted.lower(*args).compile().memory_analysis()
    out = {
        "arguments": m.argument_size_in_bytes,
        "outputs": m.output_size_in_bytes,
        "temporaries": m.temp_size_in_bytes,
        "aliased": m.alias_size_in_bytes,
    }
    out["peak"] = out["arguments"] + out["outputs"] + out["temporaries"] - out["aliased"]
    return out


def device_peak_bytes(device):
    """The device's own peak bytes in use since start, where it reports one (not on CPU)."""
    stats = device.memory_stats()
    return (stats or {}).get("peak_bytes_in_use")


def _generate_args(prompt_batch):
    return [
        *(jnp.asarray(getattr(prompt_batch, k)) for k in ("tokens", "positions", "segment_ids")),
        jnp.asarray(prompt_batch.rows, jnp.int32),
        np.uint32(0),
    ]


def step_memory(cfg, variables, batch: int, span: int) -> dict:
    """XLA's byte counts for one decode step (one token per row) of the unrolled model on its
    variables, the cache donated as the generator's loop hands it on: a step that copied the
    cache would need the cache's bytes in temporaries."""
    model = decode_model(cfg)
    cache = jax.eval_shape(lambda v: kv_cache.init(model, v, batch, span), variables)

    step = functools.partial(decode_step, model)
    one = jax.ShapeDtypeStruct((batch, 1), jnp.int32)
    shapes = jax.eval_shape(lambda v: v, variables)
    return compiled_memory(jax.jit(step, donate_argnums=1), shapes, cache, one, one, one)


def restored_variables(variables, mesh, directory: str) -> dict:
    """`variables` as decoding gets them from a run: saved in `directory` with twice their
    size of optimizer statistics beside them (Adam's two moments), read back by
    pax.decode.run's partial restore, which reads the parameters only."""
    state = {"params": variables["params"], "opt_state": [variables["params"]] * 2}
    path = os.path.join(directory, step_name(0), "state")
    ocp.PyTreeCheckpointer().save(path, state)
    replicated = sharding.replicated(mesh)
    parts = {
        "params": jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=replicated),
            variables["params"],
        )
    }
    return restore_parts(types.SimpleNamespace(directory=directory), 0, parts)


def memory(cfg, mesh, variables, prompt_batch, new: int, repeats: int = 0) -> dict:
    """Decoding's peak memory, as pax.decode.run decodes (weights unrolled once per
    checkpoint), beside its parts; and what decoding straight from the stacked weights would
    cost: bytes (its peak - the unrolled one's) and, with `repeats`, seconds (median call on
    stacked weights - median call on unrolled ones)."""
    batch, bucket = prompt_batch.tokens.shape
    flat_cfg = dataclasses.replace(cfg, use_repeated_layer=False)
    unrolled = jax.jit(lambda v: unscan(v, cfg.num_layers))(variables)
    layouts = {"unrolled": unrolled}
    if cfg.use_repeated_layer:
        layouts["stacked"] = variables
    generators, out = {}, {}
    for name, v in layouts.items():
        generators[name] = Generator(
            cfg, mesh, jax.tree.map(lambda _: sharding.replicated(mesh), v), new, Sampling("greedy")
        )
        out[f"{name}_decode"] = compiled_memory(
            generators[name]._generate, v, *_generate_args(prompt_batch)
        )
    out.update(
        parameter_bytes=parameter_bytes(cfg),
        cache_bytes=cache_bytes(cfg, batch, bucket + new),
        activation_bytes=activation_bytes(cfg, batch, bucket, bucket + new, new),
        step=step_memory(flat_cfg, unrolled, batch, bucket + new),
    )
    out["decode"] = out.pop("unrolled_decode")
    out["parts_bytes"] = out["parameter_bytes"] + out["cache_bytes"] + out["activation_bytes"]
    out["peak_over_parts"] = out["decode"]["peak"] / out["parts_bytes"]
    if "stacked" in layouts:
        out["unscan_bytes"] = out["stacked_decode"]["peak"] - out["decode"]["peak"]
    if "stacked" in layouts and repeats:
        seconds = {}
        for name, v in layouts.items():
            generators[name](v, prompt_batch, seed=0)  # compile
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                generators[name](v, prompt_batch, seed=0)
                times.append(time.perf_counter() - start)
            seconds[name] = statistics.median(times)
        out["unrolled_s"], out["stacked_s"] = seconds["unrolled"], seconds["stacked"]
        out["unscan_s"] = seconds["stacked"] - seconds["unrolled"]
    peak = device_peak_bytes(jax.devices()[0])
    if peak is not None:
        out["device_peak_bytes"] = peak
    return out


def step_bytes(cfg, batch: int, length: int, span: int = 0) -> int:
    """The least a forward step over `length` tokens per row moves: the parameters, plus with a
    cache of `span` slots the whole buffer (read, or at the prefill filled), without one the
    keys and values of its own tokens, written once and read once."""
    if span:
        return parameter_bytes(cfg) + cache_bytes(cfg, batch, span)
    kv = 2 * cfg.num_layers * batch * length * cfg.num_kv_heads * cfg.dims_per_head
    return parameter_bytes(cfg) + 2 * kv * np.dtype(cfg.fprop_dtype).itemsize


def roofline_seconds(flops: float, nbytes: float, peak: float, bandwidth: float) -> float:
    return max(flops / peak, nbytes / bandwidth)


def predicted_roofline(
    cfg, batch: int, prompt_bucket: int, new: int, peak: float, bandwidth: float
) -> dict:
    """Roofline times of both ways of generating `new` tokens: the sum over their steps of
    max(FLOPs / peak, bytes / bandwidth)."""
    span = prompt_bucket + new

    def seconds(tokens, attended, length, cache_span=0):
        flops = _forward_flops(cfg, batch * tokens, attended)
        return roofline_seconds(flops, step_bytes(cfg, batch, length, cache_span), peak, bandwidth)

    cached = seconds(prompt_bucket, span, prompt_bucket, span)  # prefill
    cached += (new - 1) * seconds(1, span, 1, span)
    recompute = 0.0
    for i in range(new):
        length = _bucket(prompt_bucket + i)
        recompute += seconds(length, length, length)
    return {
        "cached_roofline_s": cached,
        "recompute_roofline_s": recompute,
        "roofline_speedup": recompute / cached,
    }


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


def _bucket(length: int) -> int:
    return -(-length // BUCKET) * BUCKET


def predicted_speedup(cfg, batch: int, prompt_bucket: int, new: int) -> dict:
    """FLOPs of both ways of generating `new` tokens after prompts padded to prompt_bucket."""
    span = prompt_bucket + new  # the cache buffer every cached token attends over
    cached = _forward_flops(cfg, batch * prompt_bucket, span)  # prefill
    cached += (new - 1) * _forward_flops(cfg, batch, span)  # one token per row per step
    recompute = sum(
        _forward_flops(cfg, batch * _bucket(prompt_bucket + i), _bucket(prompt_bucket + i))
        for i in range(new)
    )
    return {"cached_flops": cached, "recompute_flops": recompute, "speedup": recompute / cached}


class Recompute:
    """Greedy decoding without a cache: the model over the sequence so far, every step."""

    def __init__(self, model, variables, batch, new: int):
        self.model, self.variables, self.new = model, variables, new
        self.start = batch.tokens.shape[1]
        total = _bucket(self.start + new)
        pad = total - self.start
        self.tokens = jnp.pad(jnp.asarray(batch.tokens), ((0, 0), (0, pad)))
        # Generated tokens take positions on from each prompt's last; the slots not yet written
        # are segment 0, which real tokens (segment 1) never attend to.
        last = batch.positions[:, -1:]
        self.positions = jnp.asarray(
            np.concatenate([batch.positions, last + 1 + np.arange(pad)], axis=1)
        )
        self.segments = jnp.pad(jnp.asarray(batch.segment_ids), ((0, 0), (0, pad)))
        self._step = jax.jit(self._step_fn, static_argnums=4, donate_argnums=(1, 2))

    def _step_fn(self, variables, tokens, segments, n, length):
        logits = self.model.apply(
            variables, tokens[:, :length], self.positions[:, :length], segments[:, :length]
        )
        token = jnp.argmax(jax.lax.dynamic_index_in_dim(logits, n - 1, 1, False), -1)
        tokens = jax.lax.dynamic_update_index_in_dim(tokens, token.astype(tokens.dtype), n, 1)
        segments = jax.lax.dynamic_update_index_in_dim(
            segments, jnp.ones_like(token, segments.dtype), n, 1
        )
        return tokens, segments

    def lengths(self):
        """The bucket each step runs at."""
        return [_bucket(self.start + i) for i in range(self.new)]

    def run(self):
        """The whole loop; the generated tokens (batch, new)."""
        tokens, segments = jnp.array(self.tokens), jnp.array(self.segments)  # donated below
        for i, length in enumerate(self.lengths()):
            tokens, segments = self._step(self.variables, tokens, segments, self.start + i, length)
        return np.asarray(tokens[:, self.start : self.start + self.new])

    def step_seconds(self, length: int, repeats: int) -> float:
        """Median time of one step at a bucket length (compiled and warmed first)."""
        times = []
        for r in range(repeats + 1):
            tokens, segments = jnp.array(self.tokens), jnp.array(self.segments)
            jax.block_until_ready((tokens, segments))
            start = time.perf_counter()
            jax.block_until_ready(self._step(self.variables, tokens, segments, length - 1, length))
            if r:
                times.append(time.perf_counter() - start)
        return statistics.median(times)


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
    prompt_bucket = prompt_batch.tokens.shape[1]
    with tempfile.TemporaryDirectory() as directory:
        restored = restored_variables(variables, mesh, directory)
    # Laid out as pax.decode.run lays out a checkpoint, once.
    decoded = jax.jit(lambda v: unscan(v, cfg.num_layers))(restored)
    replicated = jax.tree.map(lambda _: sharding.replicated(mesh), decoded)
    peak = mfu.measure_matmul_peak(cfg.fprop_dtype)
    bandwidth = measure_read_bandwidth(64 if small else 256)
    rows = []
    for new in news:
        generator = Generator(cfg, mesh, replicated, new, Sampling("greedy"))
        generator(decoded, prompt_batch, seed=0)  # compile
        cached_s = []
        for _ in range(repeats):
            start = time.perf_counter()
            out = generator(decoded, prompt_batch, seed=0)
            cached_s.append(time.perf_counter() - start)
        recompute = Recompute(model, variables, prompt_batch, new)
        per_bucket = {
            length: recompute.step_seconds(length, repeats) for length in set(recompute.lengths())
        }
        recompute_s = sum(per_bucket[length] for length in recompute.lengths())
        row = {
            "new_tokens": new,
            "cached_s": _stats(cached_s),
            "recompute_s": recompute_s,
            "recompute_step_s_by_length": {str(k): v for k, v in sorted(per_bucket.items())},
            **predicted_speedup(cfg, batch, prompt_bucket, new),
            **predicted_roofline(cfg, batch, prompt_bucket, new, peak, bandwidth),
            "cached_step_bytes": step_bytes(cfg, batch, 1, prompt_bucket + new),
            # The stacked layout's cost is timed once, at the shorter length.
            "memory": memory(
                cfg, mesh, restored, prompt_batch, new, repeats if new == news[0] else 0
            ),
        }
        if new == news[0]:  # the real loop once, against the per-bucket sum
            recompute.run()  # compiled already; this one warms the loop's own dispatch
            start = time.perf_counter()
            recomputed = recompute.run()
            row["recompute_loop_s"] = time.perf_counter() - start
            row["same_tokens"] = bool(np.array_equal(recomputed, out.tokens))
        row["measured_speedup"] = recompute_s / row["cached_s"]["median"]
        row["measured_over_predicted"] = row["measured_speedup"] / row["speedup"]
        row["measured_over_roofline"] = row["measured_speedup"] / row["roofline_speedup"]
        row["cached_roofline_over_measured"] = row["cached_roofline_s"] / row["cached_s"]["median"]
        row["recompute_roofline_over_measured"] = row["recompute_roofline_s"] / recompute_s
        row["cached_tokens_per_s"] = batch * new / row["cached_s"]["median"]
        row["recompute_tokens_per_s"] = batch * new / recompute_s
        rows.append(row)
    return {
        "device": f"{device.platform}: {device.device_kind}",
        "config": {
            "layers": cfg.num_layers,
            "model_dims": cfg.model_dims,
            "hidden_dims": cfg.hidden_dims,
            "heads": cfg.num_heads,
            "batch": batch,
            "prompt_tokens": prompt_len,
            "prompt_bucket": prompt_bucket,
            "recompute_bucket": BUCKET,
            "dtype": cfg.fprop_dtype,
        },
        "peak_flops": peak,
        "read_bandwidth": bandwidth,
        "parameter_bytes": parameter_bytes(cfg),
        "runs": rows,
    }


def _stats(values) -> dict:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


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


def memory_report(new: int, m: dict) -> list:
    mb = 1e6
    d = m["decode"]
    lines = [
        f"decode {new:>5} new: peak memory {d['peak'] / mb:.2f} MB (XLA: arguments "
        f"{d['arguments'] / mb:.2f}, temporaries {d['temporaries'] / mb:.2f}, outputs "
        f"{d['outputs'] / mb:.3f}) vs parameters {m['parameter_bytes'] / mb:.2f} + cache "
        f"{m['cache_bytes'] / mb:.2f} + activations {m['activation_bytes'] / mb:.2f} = "
        f"{m['parts_bytes'] / mb:.2f} MB: {m['peak_over_parts']:.2f} (target <= 1); a step's "
        f"temporaries {m['step']['temporaries'] / mb:.2f} MB (copying the cache needs "
        f"{m['cache_bytes'] / mb:.2f})"
    ]
    if "unscan_bytes" in m:
        line = (
            f"decode {new:>5} new: on the stacked weights (each call slices out every layer's): peak "
            f"{m['stacked_decode']['peak'] / mb:.2f} MB (+{m['unscan_bytes'] / mb:.2f})"
        )
        if "unscan_s" in m:
            line += (
                f", {m['stacked_s']:.3g} s a call vs {m['unrolled_s']:.3g} s unrolled "
                f"({m['unscan_s']:+.3g} s)"
            )
        lines.append(line)
    if "device_peak_bytes" in m:
        lines.append(
            f"decode {new:>5} new: the device's own peak in use {m['device_peak_bytes'] / mb:.2f} MB"
        )
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="a tiny model (for tests)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    result = measure(args.small, args.repeats)
    print(report(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
