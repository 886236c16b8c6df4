"""`./noxw -s bench`: the trainer against a hand-written loop, the matmul peak, checkpoint I/O
and the input pipeline, all measured in one process on this machine.

Every figure is the median over repeats, with the spread (min–max) beside it.
"""

import argparse
import json
import os
import platform
import statistics
import tempfile
import time

import jax
import numpy as np

from benchmarks import minimal_loop
from pax.checkpoint.manager import Checkpointer
from pax.data.corpus import embedded_text
from pax.data.sources import WindowDataset
from pax.data.tokenizers import ByteTokenizer
from pax.tasks.lm.params.lm_cloud import LmCloudSpmdTiny
from pax.train import loop, mfu
from pax.train import state as state_lib


class BenchLm(LmCloudSpmdTiny):
    """Matmul-dominated on CPU: 4 layers × 512 dims, 8 heads, FFN 2048, seq 256, batch 8, f32."""

    NUM_LAYERS = 4
    MODEL_DIMS = 512
    HIDDEN_DIMS = 2048
    NUM_HEADS = 8
    SEQ_LEN = 256
    PERCORE_BATCH_SIZE = 8
    FPROP_DTYPE = "float32"
    LR_SCHEDULE = "constant"
    LEARNING_RATE = 1e-3
    EVAL_EVERY_N_STEPS = 10**9
    EVAL_NUM_BATCHES = 1


class SmallBenchLm(BenchLm):
    """For the test that keeps the benchmark from rotting: figures, not speed."""

    NUM_LAYERS = 1
    MODEL_DIMS = 64
    HIDDEN_DIMS = 128
    NUM_HEADS = 2
    SEQ_LEN = 32


def _stats(values) -> dict:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def trainer_step_times(experiment_cls, steps: int, repeats: int, job_dir: str) -> list[float]:
    """The trainer's own step_time_s, one per summary interval of `steps` steps."""
    exp = type(
        "Bench",
        (experiment_cls,),
        {"NUM_TRAIN_STEPS": steps * repeats, "SUMMARY_EVERY_N_STEPS": steps},
    )
    loop.train(
        loop.prepare(exp(), devices=jax.devices()[:1]),
        job_dir,
        "benchmarks.BenchLm",
        checkpoint_saving=False,
    )
    with open(os.path.join(job_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [r["step_time_s"] for r in rows if r["split"] == "train" and r["step_time_s"]]


def checkpoint_figures(experiment_cls, repeats: int, directory: str) -> dict:
    run = loop.prepare(experiment_cls(), devices=jax.devices()[:1])
    abstract, shardings = state_lib.shardings(run.model, run.tx, run.mesh)
    state = state_lib.initialize(run.model, run.tx, shardings, seed=0)
    nbytes = sum(x.nbytes for x in jax.tree.leaves(state))
    sync_s, async_stall_s, plain_s = [], [], []
    for i in range(repeats):
        sync = Checkpointer(os.path.join(directory, f"sync{i}"), max_to_keep=1, async_save=False)
        start = time.perf_counter()
        sync.save(1, state)
        sync.close()
        sync_s.append(time.perf_counter() - start)

        asynchronous = Checkpointer(os.path.join(directory, f"async{i}"), max_to_keep=1)
        start = time.perf_counter()
        asynchronous.save(1, state)  # returns once device arrays are copied out; writes go on
        async_stall_s.append(time.perf_counter() - start)
        asynchronous.close()

        # The same bytes written plainly, sequentially, to the same disk.
        host = np.concatenate(
            [np.asarray(x).reshape(-1).view(np.uint8) for x in jax.tree.leaves(state)]
        )
        path = os.path.join(directory, f"plain{i}.bin")
        start = time.perf_counter()
        with open(path, "wb") as f:
            f.write(host.tobytes())
            f.flush()
            os.fsync(f.fileno())
        plain_s.append(time.perf_counter() - start)
    return {
        "bytes": nbytes,
        "sync_save_s": _stats(sync_s),
        "async_stall_s": _stats(async_stall_s),
        "plain_write_s": _stats(plain_s),
    }


def input_pipeline_tokens_per_s(experiment_cls, batches: int, repeats: int) -> list[float]:
    task = experiment_cls().task()
    data = WindowDataset(ByteTokenizer().encode(embedded_text()), task.model.max_seq_len, seed=0)
    batch = task.train.percore_batch_size
    rates = []
    for r in range(repeats):
        start = time.perf_counter()
        for i in range(batches):
            data.batch(r * batches + i, batch)
        rates.append(batches * batch * task.model.max_seq_len / (time.perf_counter() - start))
    return rates


def measure(experiment_cls, steps: int, repeats: int) -> dict:
    task = experiment_cls().task()
    cfg = task.model
    tokens_per_step = task.train.percore_batch_size * cfg.max_seq_len
    flops_per_step = mfu.flops_per_step(cfg, task.train.percore_batch_size)
    peaks = [mfu.measure_matmul_peak(cfg.activation_dtype) for _ in range(repeats)]
    peak = statistics.median(peaks)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = trainer_step_times(experiment_cls, steps, repeats, os.path.join(tmp, "job"))
        data = WindowDataset(ByteTokenizer().encode(embedded_text()), cfg.max_seq_len, seed=0)
        batches = [data.batch(i, task.train.percore_batch_size) for i in range(8)]
        minimal = minimal_loop.run(cfg, task.optimizer, batches, steps, repeats)
        checkpoint = checkpoint_figures(experiment_cls, repeats, os.path.join(tmp, "ckpt"))
    pipeline = input_pipeline_tokens_per_s(experiment_cls, 20, repeats)
    trainer_s, minimal_s = statistics.median(trainer), statistics.median(minimal)
    device = jax.devices()[0]
    return {
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "device": f"{device.platform}: {device.device_kind}",
            "devices_used": 1,
            "jax": jax.__version__,
        },
        "config": {
            "layers": cfg.num_layers,
            "model_dims": cfg.model_dims,
            "hidden_dims": cfg.hidden_dims,
            "heads": cfg.num_heads,
            "seq": cfg.max_seq_len,
            "batch": task.train.percore_batch_size,
            "dtype": cfg.activation_dtype,
            "flops_per_step": flops_per_step,
        },
        "peak_flops": _stats(peaks)
        | {"how": f"best of 5 timed 2048x2048 {cfg.activation_dtype} matmuls (jit), per repeat"},
        "trainer_step_s": _stats(trainer),
        "minimal_step_s": _stats(minimal),
        "trainer_over_minimal": trainer_s / minimal_s,
        "trainer_tokens_per_s": tokens_per_step / trainer_s,
        "minimal_tokens_per_s": tokens_per_step / minimal_s,
        "trainer_mfu": flops_per_step / trainer_s / peak,
        "minimal_mfu": flops_per_step / minimal_s / peak,
        "checkpoint": checkpoint,
        "checkpoint_mb_per_s": checkpoint["bytes"] / checkpoint["sync_save_s"]["median"] / 1e6,
        "plain_write_mb_per_s": checkpoint["bytes"] / checkpoint["plain_write_s"]["median"] / 1e6,
        "async_stall_over_sync_save": (
            checkpoint["async_stall_s"]["median"] / checkpoint["sync_save_s"]["median"]
        ),
        "input_tokens_per_s": _stats(pipeline),
        "input_over_trainer_consumption": statistics.median(pipeline)
        / (tokens_per_step / trainer_s),
    }


def _spread(s: dict, scale=1.0, fmt="{:.4g}") -> str:
    return (
        f"{fmt.format(s['median'] * scale)}  (min {fmt.format(s['min'] * scale)}, "
        f"max {fmt.format(s['max'] * scale)}, n={s['n']})"
    )


def report(r: dict) -> str:
    c = r["config"]
    ck = r["checkpoint"]
    lines = [
        f"machine      {r['machine']['device']}, {r['machine']['cpus']} CPUs, 1 device used, "
        f"jax {r['machine']['jax']}, {r['machine']['platform']}",
        f"config       {c['layers']} layers x {c['model_dims']} dims, FFN {c['hidden_dims']}, "
        f"{c['heads']} heads, seq {c['seq']}, batch {c['batch']}, {c['dtype']}; "
        f"{c['flops_per_step'] / 1e9:.1f} GFLOP/step",
        f"peak         {_spread(r['peak_flops'], 1e-9)} GFLOP/s  [{r['peak_flops']['how']}]",
        f"trainer      step {_spread(r['trainer_step_s'], 1e3)} ms   "
        f"{r['trainer_tokens_per_s']:.0f} tokens/s   MFU {100 * r['trainer_mfu']:.1f}%",
        f"minimal      step {_spread(r['minimal_step_s'], 1e3)} ms   "
        f"{r['minimal_tokens_per_s']:.0f} tokens/s   MFU {100 * r['minimal_mfu']:.1f}%",
        f"ratio        trainer/minimal step time {r['trainer_over_minimal']:.3f}  (target <= 1.03)",
        f"checkpoint   {ck['bytes'] / 1e6:.1f} MB: orbax sync save {_spread(ck['sync_save_s'])} s "
        f"= {r['checkpoint_mb_per_s']:.0f} MB/s; plain sequential write+fsync "
        f"{_spread(ck['plain_write_s'])} s = {r['plain_write_mb_per_s']:.0f} MB/s",
        f"async save   loop stall {_spread(ck['async_stall_s'], 1e3)} ms = "
        f"{100 * r['async_stall_over_sync_save']:.1f}% of a synchronous save  (target < 10%)",
        f"input        {_spread(r['input_tokens_per_s'], fmt='{:.3g}')} tokens/s = "
        f"{r['input_over_trainer_consumption']:.0f}x what the trainer consumes  (target >= 10x)",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="steps per timed interval")
    parser.add_argument("--repeats", type=int, default=5, help="timed intervals / repeats")
    parser.add_argument("--small", action="store_true", help="a tiny model (for tests)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    result = measure(SmallBenchLm if args.small else BenchLm, args.steps, args.repeats)
    print(report(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
