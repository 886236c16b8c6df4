"""GPU benchmark: the 1B config's train step in bf16 and FP8, and the independent baseline.

  ci/gpu_bench.sh [RELEASE] [--dry-run] [-- FLAGS]      (FLAGS: --steps N, --batch B, --json F)

On one H100/H200: C4Spmd1BAdam4Replicas (13 × 2560, 1.0B parameters, seq 1024, synthetic
tokens, full remat as Pax runs it) on one device, the trainer's compiled step (measured as
pax.train.fp8_check measures it) in bf16 and with USE_FP8, then benchmarks/baseline.py at the
same shapes in bf16. Prints step time, tokens/s and MFU of each against the chip's dense bf16
peak (pax.train.mfu's table), the FP8/bf16 speed-up and trainer / baseline.

--dry-run runs all of it on CPU at a tiny size (LmCloudSpmdTiny's shapes, batch 2, 2 steps):
it checks the script end to end, and its figures say nothing about a GPU. Without --dry-run
and without a GPU it stops with exit 2.
"""

import json
import sys
import time

import jax
import numpy as np

from benchmarks import baseline
from benchmarks.bench import baseline_optimizer, baseline_shape
from benchmarks.tpu_bench import synthetic_batches
from pax.errors import ExitingArgumentParser
from pax.train import fp8_check, mfu

GPU_EXPERIMENT = "tasks.lm.params.c4.C4Spmd1BAdam4Replicas"
DRY_RUN_EXPERIMENT = "tasks.lm.params.lm_cloud.LmCloudSpmdTiny"
# Targets for one H100/H200 (docs/benchmarks.md), printed beside the figures.
MFU_GOAL, FP8_SPEEDUP_GOAL = 0.55, 1.4


def measure_baseline(cfg, optimizer, batch: int, steps: int, peak_flops: float) -> dict:
    """The independent baseline at cfg's shapes, with the trainer's optimizer (its
    OptimizerConfig), on the default device, synthetic tokens."""
    run = baseline.Baseline(
        baseline_shape(cfg),
        synthetic_batches(cfg.vocab_size, batch, cfg.seq_len),
        **baseline_optimizer(optimizer),
    )
    start = time.perf_counter()
    run.interval(1)  # compiles
    compile_s = time.perf_counter() - start
    step_s = run.interval(steps)
    tokens = batch * cfg.seq_len
    return {
        "compile_s": compile_s,
        "step_s": step_s,
        "tokens_per_s": tokens / step_s,
        "mfu": mfu.flops_per_step(cfg, batch) / step_s / peak_flops,
        "loss": float(run.loss),
    }


def measure(name: str, steps: int, batch=None) -> dict:
    """The trainer's step in bf16 and FP8 and the baseline's in bf16 on the default device,
    and the bf16 step's peak device memory (what the allocator held at most: read before
    anything else runs, so a fresh process's figure is that step's)."""
    bf16 = fp8_check.measure(name, False, steps, batch)
    stats = jax.devices()[0].memory_stats()  # None on CPU
    fp8 = fp8_check.measure(name, True, steps, batch)
    cfg = bf16["model"]
    # One peak for every row: on a GPU the table's, on CPU the bf16 run's measurement.
    peak = bf16["peak"]
    fp8["mfu"] = fp8["flops_per_step"] / fp8["step_s"] / peak["flops"]
    base = measure_baseline(cfg, bf16["optimizer"], bf16["batch"], steps, peak["flops"])
    keys = ("step_s", "tokens_per_s", "mfu", "compile_s")
    return {
        "experiment": bf16["experiment"],
        "model": cfg,
        "params": bf16["params"],
        "batch": bf16["batch"],
        "flops_per_step": bf16["flops_per_step"],
        "peak": peak,
        "trainer_bf16": {k: bf16[k] for k in keys},
        "trainer_fp8": {k: fp8[k] for k in keys},
        "baseline_bf16": {k: base[k] for k in keys},
        "fp8_speedup": bf16["step_s"] / fp8["step_s"],
        "trainer_over_baseline": bf16["step_s"] / base["step_s"],
        "f8_gemms": fp8["f8_gemms"],
        "f8_dots_lowered": fp8["f8_dots_lowered"],
        "peak_bytes_in_use_bf16": stats and stats.get("peak_bytes_in_use"),
        "losses": bf16["losses"] + fp8["losses"] + [base["loss"]],
    }


def main(argv=None) -> int:
    parser = ExitingArgumentParser(
        prog="python -m benchmarks.gpu_bench", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny size: checks the script")
    parser.add_argument("--steps", type=int, help="timed steps per variant (default 10; dry: 2)")
    parser.add_argument("--batch", type=int, help="per-device batch (default 32; dry: 2)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    device = jax.devices()[0]
    if device.platform != "gpu" and not args.dry_run:
        print(
            f"gpu_bench: error: no GPU here (device 0 is {device.platform}: "
            f"{device.device_kind}); run on an H100/H200, or pass --dry-run to check the script "
            "on CPU",
            file=sys.stderr,
        )
        return 2
    name = DRY_RUN_EXPERIMENT if args.dry_run else GPU_EXPERIMENT
    steps = args.steps or (2 if args.dry_run else 10)
    batch = args.batch or (2 if args.dry_run else None)
    print(
        f"gpu_bench: jax {jax.__version__}, device 0 of {jax.device_count()}: {device.platform} "
        f"({device.device_kind})",
        flush=True,
    )
    if args.dry_run:
        print("DRY RUN on CPU at a tiny size: these figures say nothing about a GPU.", flush=True)
    m = measure(name, steps, batch)
    bf16, fp8, base = m["trainer_bf16"], m["trainer_fp8"], m["baseline_bf16"]
    cfg, peak = m["model"], m["peak"]
    print(
        f"model: {m['experiment']}, {m['params'] / 1e9:.3f}B params ({cfg.num_layers} "
        f"layers x {cfg.model_dims}, FFN {cfg.hidden_dims}, {cfg.num_heads} heads), seq "
        f"{cfg.seq_len}, batch {m['batch']}, remat {cfg.remat_policy}, "
        f"{m['flops_per_step'] / 1e12:.3f} TFLOP/step (pax.train.mfu), synthetic tokens"
    )
    print(f"peak: {peak['flops'] / 1e12:.4g} TFLOP/s ({peak['source']}, {peak['device_kind']})")
    rows = (("trainer bf16", bf16), ("trainer fp8", fp8), ("baseline bf16", base))
    for label, r in rows:
        print(
            f"{label:14s} step {r['step_s'] * 1e3:9.1f} ms  {r['tokens_per_s']:11.0f} tokens/s  "
            f"MFU {100 * r['mfu']:5.1f}%  compile {r['compile_s']:5.1f} s  ({steps} timed steps)"
        )
    print(
        f"speed-up fp8 / bf16: {m['fp8_speedup']:.2f}x (goal >= {FP8_SPEEDUP_GOAL}x); MFU bf16 "
        f"{100 * bf16['mfu']:.1f}% (goal >= {100 * MFU_GOAL:.0f}%); trainer / baseline step "
        f"time (bf16): {m['trainer_over_baseline']:.3f}; FP8 GEMMs in the FP8 step: "
        f"{m['f8_gemms']}"
    )
    finite = bool(np.isfinite(m["losses"]).all())
    if args.json:
        figures = {
            "device": f"{device.platform}: {device.device_kind}",
            "dry_run": args.dry_run,
            "steps": steps,
            **{k: v for k, v in m.items() if k not in ("model", "params", "losses")},
        }
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    print("OK" if finite else "FAILED: a loss is not finite")
    return 0 if finite else 1


if __name__ == "__main__":
    sys.exit(main())
