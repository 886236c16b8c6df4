"""Decoding's memory: XLA's own accounting of the compiled generator beside the parts counted
by hand (benchmarks.decode.sizes), and the copies it avoids (unscan's, a step's of the cache)."""

import dataclasses
import functools
import os
import statistics
import time
import types

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from benchmarks.decode.sizes import activation_bytes, cache_bytes, parameter_bytes
from pax.checkpoint.manager import step_name
from pax.decode.decoder import restore_parts
from pax.decode.generate import Generator, decode_model, decode_step, unscan
from pax.decode.sampling import Sampling
from pax.models import kv_cache
from pax.parallel import sharding


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
    pax.decode.decoder's partial restore, which reads the parameters only."""
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
    """Decoding's peak memory, as pax.decode.decoder decodes (weights unrolled once per
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
