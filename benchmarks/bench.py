"""`./noxw -s bench`: the trainer, its model in a hand-written loop and an independent baseline.

Three loops train the same shapes in one process, an interval of each per round: the trainer
(pax.train.loop), the project's TransformerLm in a minimal flax + optax loop
(benchmarks/minimal_loop.py: the framework's cost is trainer / minimal) and a model written
from scratch without pax (benchmarks/baseline.py: the model's cost is minimal / baseline). The
matmul peak, checkpoint I/O, the input pipeline and decoding (the KV cache against recomputing
the prefix, benchmarks/decode.py) are measured in the same run.

Every figure is the median over rounds, with the spread (min–max) beside it; ratios are the
median of per-round ratios.
"""

import argparse
import dataclasses
import json
import os
import platform
import statistics
import tempfile
import time

import jax
import numpy as np

from benchmarks import baseline, figures, minimal_loop, profile
from benchmarks.decode import measure as decoding
from benchmarks.table import BENCH_JSON, ROOT, record
from pax.checkpoint.manager import Checkpointer
from pax.data.corpus import embedded_text
from pax.data.sources import WindowDataset
from pax.data.tokenizers import ByteTokenizer
from pax.errors import ExitingArgumentParser
from pax.tasks.lm.params.lm_cloud import LmCloudSpmdTiny
from pax.train import loop, mfu
from pax.train import state as state_lib
from pax.train.instantiate import instantiate


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


class LargeBenchLm(BenchLm):
    """Bigger matmuls, closer to accelerator shapes: 8 layers × 1024 dims, 16 heads, seq 512.

    Batch 2 keeps one step to a few seconds on a 2-core CPU (0.67 TFLOP/step).
    """

    NUM_LAYERS = 8
    LAYER_SCAN_UNROLL = 8  # the whole stack unrolled, as the CPU-sized runs' 4 layers are
    MODEL_DIMS = 1024
    HIDDEN_DIMS = 4096
    NUM_HEADS = 16
    SEQ_LEN = 512
    PERCORE_BATCH_SIZE = 2


class SmallBenchLm(BenchLm):
    """For the test that keeps the benchmark from rotting: figures, not speed."""

    NUM_LAYERS = 1
    MODEL_DIMS = 64
    HIDDEN_DIMS = 128
    NUM_HEADS = 2
    SEQ_LEN = 32


def trainer_step_times(
    experiment_cls, steps: int, repeats: int, job_dir: str, on_summary=None
) -> list[float]:
    """The trainer's own step_time_s, one per summary interval of `steps` steps."""
    exp = type(
        "Bench",
        (experiment_cls,),
        {"NUM_TRAIN_STEPS": steps * repeats, "SUMMARY_EVERY_N_STEPS": steps},
    )
    # Training alone is timed: without its eval splits the run compiles and runs no eval step.
    run = dataclasses.replace(instantiate(exp(), devices=jax.devices()[:1]), eval_data={})
    loop.train(
        run,
        job_dir,
        "benchmarks.BenchLm",
        checkpoint_saving=False,
        on_summary=on_summary,
    )
    with open(os.path.join(job_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [r["step_time_s"] for r in rows if r["split"] == "train" and r["step_time_s"]]


def checkpoint_figures(experiment_cls, repeats: int, directory: str) -> dict:
    run = instantiate(experiment_cls(), devices=jax.devices()[:1])
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
        "sync_save_s": figures.spread(sync_s),
        "async_stall_s": figures.spread(async_stall_s),
        "plain_write_s": figures.spread(plain_s),
    }


def input_pipeline_tokens_per_s(experiment_cls, batches: int, repeats: int) -> list[float]:
    task = experiment_cls().task()
    data = WindowDataset(ByteTokenizer().encode(embedded_text()), task.model.seq_len, seed=0)
    batch = task.train.percore_batch_size
    rates = []
    for r in range(repeats):
        start = time.perf_counter()
        for i in range(batches):
            data.batch(r * batches + i, batch)
        rates.append(batches * batch * task.model.seq_len / (time.perf_counter() - start))
    return rates


def baseline_shape(cfg, attention: str = "xla") -> baseline.Shape:
    """The independent baseline at the trainer's shapes and logit caps, with the attention kernel
    given (one of baseline.ATTENTION); it covers only what BenchLm uses."""
    plain = (
        cfg.num_kv_heads == cfg.num_heads
        and cfg.num_heads * cfg.dims_per_head == cfg.model_dims
        and cfg.activation == "gelu"
        and not cfg.separate_embedding
        and not cfg.use_fp8
        and cfg.remat_policy in baseline.REMAT_POLICIES
        and not cfg.attention_query_chunk
    )
    if not plain:
        raise ValueError(f"benchmarks.baseline has no counterpart for {cfg}")
    return baseline.Shape(
        vocab=cfg.vocab_size,
        layers=cfg.num_layers,
        dims=cfg.model_dims,
        hidden=cfg.hidden_dims,
        heads=cfg.num_heads,
        seq=cfg.seq_len,
        dtype=cfg.fprop_dtype,
        remat=cfg.remat_policy,
        attention=attention,
        attention_cap=max(cfg.atten_logit_cap, 0.0),
        output_cap=max(cfg.softmax_cap, 0.0),
    )


def baseline_optimizer(opt) -> dict:
    """benchmarks.baseline.optimizer's arguments for the trainer's OptimizerConfig: the same
    clip, moments, decay, peak learning rate and, for Pax's Adam, per-tensor update cap."""
    if opt.optimizer not in ("adam", "adamw"):
        raise ValueError(f"benchmarks.baseline has no counterpart for optimizer {opt.optimizer!r}")
    return dict(
        learning_rate=opt.learning_rate,
        clip=opt.clip_gradient_norm_to_value,
        weight_decay=opt.weight_decay,
        update_rms_cap=opt.adam_clip_threshold if opt.optimizer == "adam" else 0.0,
        b1=opt.adam_beta1,
        b2=opt.adam_beta2,
        eps=opt.adam_epsilon,
        eps_root=opt.adam_epsilon_root,
    )


def _ratios(numerator, denominator) -> dict:
    """Per-round ratios: each round's intervals ran back to back, under the same load."""
    return figures.spread([n / d for n, d in zip(numerator, denominator)])


def loops(task) -> tuple:
    """The task's model in the minimal loop, and the independent baseline, on the same batches."""
    cfg = task.model
    data = WindowDataset(ByteTokenizer().encode(embedded_text()), cfg.seq_len, seed=0)
    batches = [data.batch(i, task.train.percore_batch_size) for i in range(8)]
    minimal_run = minimal_loop.MinimalLoop(cfg, task.optimizer, batches)
    baseline_run = baseline.Baseline(
        baseline_shape(cfg), batches, **baseline_optimizer(task.optimizer)
    )
    return minimal_run, baseline_run


def measure(experiment_cls, steps: int, repeats: int) -> dict:
    """Trainer, minimal loop, baseline and matmul peak, one interval each per round
    (_interleaved_times), then the checkpoint's and the input pipeline's figures."""
    task = experiment_cls().task()
    cfg = task.model
    batch = task.train.percore_batch_size
    tokens_per_step = batch * cfg.seq_len
    flops_per_step = mfu.flops_per_step(cfg, batch)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        times = _interleaved_times(experiment_cls, task, steps, repeats, os.path.join(tmp, "job"))
        checkpoint = checkpoint_figures(experiment_cls, repeats, os.path.join(tmp, "ckpt"))
    pipeline = input_pipeline_tokens_per_s(experiment_cls, 20, repeats)
    load_after = os.getloadavg()
    trainer_s = statistics.median(times["trainer"])
    return {
        "machine": _machine(load_before, load_after),
        "config": {
            "name": experiment_cls.__name__,
            "layers": cfg.num_layers,
            "model_dims": cfg.model_dims,
            "hidden_dims": cfg.hidden_dims,
            "heads": cfg.num_heads,
            "seq": cfg.seq_len,
            "batch": batch,
            "dtype": cfg.fprop_dtype,
            "flops_per_step": flops_per_step,
            "steps_per_interval": steps,
        },
        **_speeds(times, tokens_per_step, flops_per_step, cfg.fprop_dtype),
        "checkpoint": checkpoint,
        "checkpoint_mb_per_s": checkpoint["bytes"] / checkpoint["sync_save_s"]["median"] / 1e6,
        "plain_write_mb_per_s": checkpoint["bytes"] / checkpoint["plain_write_s"]["median"] / 1e6,
        "async_stall_over_sync_save": (
            checkpoint["async_stall_s"]["median"] / checkpoint["sync_save_s"]["median"]
        ),
        "input_tokens_per_s": figures.spread(pipeline),
        "input_over_trainer_consumption": statistics.median(pipeline)
        / (tokens_per_step / trainer_s),
    }


def _interleaved_times(experiment_cls, task, steps: int, repeats: int, job_dir: str) -> dict:
    """Seconds per step of each loop and the matmul peak, a list of one per round.

    The trainer's loop calls back after each summary interval; the callback runs one timed
    interval of the minimal loop and of the baseline and one peak measurement, so the load of
    a shared machine falls on all of them alike, and the ratios are taken round by round.
    """
    minimal_run, baseline_run = loops(task)
    minimal_run.interval(1), baseline_run.interval(1)  # compile before any timing
    times = {"peaks": [], "minimal": [], "baseline": []}

    def others(step, values):
        times["minimal"].append(minimal_run.interval(steps))
        times["baseline"].append(baseline_run.interval(steps))
        times["peaks"].append(mfu.measure_matmul_peak(task.model.fprop_dtype))

    times["trainer"] = trainer_step_times(experiment_cls, steps, repeats, job_dir, others)
    return times


def _machine(load_before: tuple, load_after: tuple) -> dict:
    device = jax.devices()[0]
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "device": f"{device.platform}: {device.device_kind}",
        "devices_used": 1,
        "jax": jax.__version__,
        # 1-minute load average before and after: on a shared machine, read the ratios.
        "load_avg_1m": [round(load_before[0], 2), round(load_after[0], 2)],
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }


def _speeds(times: dict, tokens_per_step: int, flops_per_step: float, dtype: str) -> dict:
    """Each loop's step time, their ratios round by round, tokens/s and MFU (medians)."""
    trainer, minimal, independent = times["trainer"], times["minimal"], times["baseline"]
    peak = statistics.median(times["peaks"])
    trainer_s, minimal_s, baseline_s = (
        statistics.median(t) for t in (trainer, minimal, independent)
    )
    return {
        "peak_flops": figures.spread(times["peaks"])
        | {"how": f"best of 5 timed 2048x2048 {dtype} matmuls (jit), per round"},
        "trainer_step_s": figures.spread(trainer),
        "minimal_step_s": figures.spread(minimal),
        "baseline_step_s": figures.spread(independent),
        "trainer_over_minimal": _ratios(trainer, minimal),
        "minimal_over_baseline": _ratios(minimal, independent),
        "trainer_over_baseline": _ratios(trainer, independent),
        "trainer_tokens_per_s": tokens_per_step / trainer_s,
        "minimal_tokens_per_s": tokens_per_step / minimal_s,
        "baseline_tokens_per_s": tokens_per_step / baseline_s,
        "trainer_mfu": flops_per_step / trainer_s / peak,
        "minimal_mfu": flops_per_step / minimal_s / peak,
        "baseline_mfu": flops_per_step / baseline_s / peak,
    }


def _spread(s: dict, scale=1.0, fmt="{:.4g}") -> str:
    return (
        f"{fmt.format(s['median'] * scale)}  (min {fmt.format(s['min'] * scale)}, "
        f"max {fmt.format(s['max'] * scale)}, n={s['n']})"
    )


def report(r: dict) -> str:
    c = r["config"]
    ck = r["checkpoint"]
    m = r["machine"]

    def ratio(key):
        return f"{r[key]['median']:.3f} ({r[key]['min']:.3f}-{r[key]['max']:.3f})"

    lines = [
        f"machine      {m['device']}, {m['cpus']} CPUs, 1 device used, jax {m['jax']}, "
        f"{m['platform']}; 1-min load average {m['load_avg_1m'][0]} before, "
        f"{m['load_avg_1m'][1]} after",
        f"config       {c['name']}: {c['layers']} layers x {c['model_dims']} dims, "
        f"FFN {c['hidden_dims']}, {c['heads']} heads, seq {c['seq']}, batch {c['batch']}, "
        f"{c['dtype']}; {c['flops_per_step'] / 1e9:.1f} GFLOP/step; "
        f"{c['steps_per_interval']} steps per interval, one interval of each loop per round",
        f"peak         {_spread(r['peak_flops'], 1e-9)} GFLOP/s  [{r['peak_flops']['how']}]",
    ]
    for label, key in (("trainer", "trainer"), ("minimal", "minimal"), ("baseline", "baseline")):
        lines.append(
            f"{label:13s}step {_spread(r[f'{key}_step_s'], 1e3)} ms   "
            f"{r[f'{key}_tokens_per_s']:.0f} tokens/s   MFU {100 * r[f'{key}_mfu']:.1f}%"
        )
    lines += [
        f"ratio        step time, median (min-max) of per-round ratios: "
        f"trainer/baseline {ratio('trainer_over_baseline')} (target <= 1.03); "
        f"minimal/baseline {ratio('minimal_over_baseline')} (the model); "
        f"trainer/minimal {ratio('trainer_over_minimal')} (the framework, target <= 1.03)",
        f"checkpoint   {ck['bytes'] / 1e6:.1f} MB: orbax sync save {_spread(ck['sync_save_s'])} s "
        f"= {r['checkpoint_mb_per_s']:.0f} MB/s; plain sequential write+fsync "
        f"{_spread(ck['plain_write_s'])} s = {r['plain_write_mb_per_s']:.0f} MB/s",
        f"async save   loop stall {_spread(ck['async_stall_s'], 1e3)} ms = "
        f"{100 * r['async_stall_over_sync_save']:.1f}% of a synchronous save  (target < 10%)",
        f"input        {_spread(r['input_tokens_per_s'], fmt='{:.3g}')} tokens/s = "
        f"{r['input_over_trainer_consumption']:.0f}x what the trainer consumes  (target >= 10x)",
    ]
    return "\n".join(lines)


CONFIGS = {"bench": BenchLm, "large": LargeBenchLm, "small": SmallBenchLm}


def experiment(config: str, dtype: str):
    """The named bench config with FPROP_DTYPE `dtype`."""
    cls = CONFIGS[config]
    if dtype == cls.FPROP_DTYPE:
        return cls
    return type(cls.__name__ + "Bf16", (cls,), {"FPROP_DTYPE": dtype})


def main(argv=None) -> int:
    parser = ExitingArgumentParser(
        prog="python -m benchmarks.bench", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--steps", type=int, default=5, help="steps per timed interval")
    parser.add_argument("--repeats", type=int, default=5, help="rounds (timed intervals each)")
    parser.add_argument(
        "--config",
        choices=sorted(CONFIGS),
        default="bench",
        help="bench: 4 x 512, seq 256 (default); large: 8 x 1024, seq 512; small: tiny, for tests",
    )
    parser.add_argument("--small", action="store_true", help="the same as --config small")
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="FPROP_DTYPE (activations) of all three loops",
    )
    parser.add_argument(
        "--decode",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure decoding (benchmarks/decode/); its recompute side takes about "
        "15 min of a 2-core CPU, so --no-decode gives the training figures alone",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead of timing, trace --steps steps of the model (in the minimal loop) and "
        "of the baseline and print where each one's time goes (benchmarks/profile.py); on a "
        "CPU, run under `taskset -c 0` for CPU time per op",
    )
    figures.add_json_flag(parser)
    parser.add_argument(
        "--record",
        action="store_true",
        help=f"also store the figures in {BENCH_JSON.relative_to(ROOT)} (replacing the same "
        "config and dtype) and rewrite the performance tables (docs/benchmarks.md) from it",
    )
    args = parser.parse_args(argv)
    if args.steps < 2 or args.repeats < 1:
        parser.error(
            "--steps must be >= 2 (the trainer's first interval loses its compile step) "
            "and --repeats >= 1"
        )
    config = "small" if args.small else args.config
    if args.profile:
        runs = loops(experiment(config, args.dtype)().task())
        print(
            profile.report(
                *(profile.op_times(profile.loop_hlo(r), r.interval, args.steps) for r in runs)
            )
        )
        return 0
    result = measure(experiment(config, args.dtype), args.steps, args.repeats)
    print(report(result))
    if args.decode:
        result["decode"] = decoding.measure(small=config == "small", repeats=args.repeats)
        print(decoding.report(result["decode"]))
    figures.write_json(args.json, result)
    if args.record:
        record(result)
        print(f"recorded in {BENCH_JSON.relative_to(ROOT)} and docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
