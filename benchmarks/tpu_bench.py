"""Accelerator benchmark: the trainer's compiled step against the independent baseline, one chip.

  python -m benchmarks.tpu_bench [--batch 8 16] [--remat full ...] [--attention auto xla]
                                 [--steps N] [--json F] [--record] [--profile] [--dry-run]

The model is Pax's 1B config (C4Spmd1BAdam4Replicas) cut to 6 layers, what one 16 GiB v5e chip
holds with Adam's state: 6 × 2560, FFN 10240, 20 heads of 128, vocab 32000, seq 1024, 0.55B
parameters, bf16 activations, synthetic tokens. Each trainer setting (batch × remat policy ×
attention kernel) is compiled and timed as `python -m pax.main` runs it
(pax.train.compiled_step), and benchmarks/baseline.py (no pax code; the experiment's logit caps,
and its optimizer from optax's pieces) at the same batch, remat policy and attention kernel:
einsum attention for `xla`, jax's splash kernel for `splash` (`auto` is recorded as the kernel it
picked). MFU is against the chip's dense bf16 peak from its data sheet (pax.train.mfu), by the
project's FLOP count and with causal attention counted at half as MaxText counts it
(`mfu_causal_half`); an 8192³ bf16 matmul measured in the same run is printed beside it.
A setting that does not fit in memory is reported as such. --profile traces the first setting
of the trainer and of the baseline and prints where each spends its time (benchmarks/profile.py).

--dry-run runs all of it on CPU at a tiny size: it checks the script end to end (the splash
kernel interpreted), and its figures say nothing about an accelerator.
"""

import gc
import importlib.metadata
import json
import sys
import time

import jax
import numpy as np

from benchmarks import baseline, figures, profile
from benchmarks.bench import baseline_optimizer, baseline_shape
from benchmarks.table import BENCH_JSON, ROOT, record_accelerator
from pax.errors import ExitingArgumentParser
from pax.models.transformer import TransformerLm
from pax.train import compiled_step, mfu
from pax.train import state as state_lib

EXPERIMENT = "tasks.lm.params.c4.C4Spmd1BAdam4Replicas"
SHAPE = dict(NUM_LAYERS=6)  # 0.55B parameters: Adam's state and a batch of 16 fit 16 GiB
DRY_RUN_SHAPE = dict(
    NUM_LAYERS=1, MODEL_DIMS=256, HIDDEN_DIMS=1024, NUM_HEADS=2, SEQ_LEN=128, VOCAB_SIZE=512
)
# Targets on one v5e chip (docs/benchmarks.md), printed beside the figures.
MFU_GOAL, RATIO_GOAL = 0.65, 1.00


def _version(package: str):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _out_of_memory(err: Exception) -> bool:
    return "RESOURCE_EXHAUSTED" in str(err) or "out of memory" in str(err).lower()


def synthetic_batches(vocab: int, batch: int, seq: int, n: int = 2) -> list:
    """`n` batches of uniformly random tokens, every position weighted: the accelerator
    benchmarks' input, where the step's speed does not depend on the text."""
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(n):
        tokens = rng.integers(0, vocab, (batch, seq + 1), dtype=np.int32)
        batches.append(
            {
                "inputs": tokens[:, :-1],
                "targets": tokens[:, 1:],
                "weights": np.ones((batch, seq), np.float32),
            }
        )
    return batches


def _timed(make, steps: int, flops: tuple, peak: float) -> dict:
    """Build a step (compiles), warm it up, time `steps` steps; out of memory is a result.
    flops: the step's by the project's count and with causal attention at half."""
    try:
        start = time.perf_counter()
        step = make()
        step.interval(1)
        compile_s = time.perf_counter() - start
        step_s = step.interval(steps)
        loss = float(step.losses[-1]) if hasattr(step, "losses") else float(step.loss)
        memory = step.memory() if hasattr(step, "memory") else None
        params = state_lib.num_params(step.abstract) if hasattr(step, "abstract") else None
    except Exception as err:  # noqa: BLE001 - only running out of memory is a figure
        if not _out_of_memory(err):
            raise
        return {"oom": str(err).strip().splitlines()[0][:300]}
    finally:
        step = None
        gc.collect()
    return {
        "step_s": step_s,
        "mfu": flops[0] / step_s / peak,
        "mfu_causal_half": flops[1] / step_s / peak,
        "compile_and_first_step_s": compile_s,
        "loss": loss,
        **({"memory": memory, "params": params} if memory else {}),
    }


def measure(args) -> dict:
    devices = jax.devices()[:1]
    device = devices[0]
    shape = DRY_RUN_SHAPE if args.dry_run else SHAPE
    peak = mfu.peak_flops(devices, "bfloat16")
    measured_peak = mfu.measure_matmul_peak("bfloat16", n=1024 if args.dry_run else 8192)
    rows, info = [], {}
    for batch in args.batch:
        for remat in args.remat:

            def experiment(attention, batch=batch, remat=remat):
                return compiled_step.one_device(
                    EXPERIMENT, batch, REMAT_POLICY=remat, ATTENTION_KERNEL=attention, **shape
                )

            task = experiment("xla").task()
            cfg = task.model
            flops = (mfu.flops_per_step(cfg, batch), mfu.flops_per_step(cfg, batch, True))
            base = baseline_shape(cfg)  # the logit caps the baseline runs
            info = {
                "model": {
                    "experiment": EXPERIMENT,
                    "overrides": shape,
                    "layers": cfg.num_layers,
                    "model_dims": cfg.model_dims,
                    "hidden_dims": cfg.hidden_dims,
                    "heads": cfg.num_heads,
                    "seq": cfg.seq_len,
                    "vocab": cfg.vocab_size,
                    "baseline_logit_caps": {
                        "attention": base.attention_cap,
                        "output": base.output_cap,
                    },
                },
            }
            row = {
                "batch": batch,
                "remat": remat,
                "flops_per_step": flops[0],
                "flops_per_step_causal_half": flops[1],
                "trainer": {},
                "baseline": {},
            }
            # Each side's results under the kernel it ran (`auto` resolved as the trainer does).
            kernels = {kernel_of(experiment(a)): a for a in args.attention}
            for kernel, attention in kernels.items():
                row["trainer"][kernel] = _timed(
                    lambda a=attention: compiled_step.CompiledStep(experiment(a), devices),
                    args.steps,
                    flops,
                    peak["flops"],
                )
                print(_line(f"trainer {kernel}", batch, remat, row["trainer"][kernel]))
            for kernel in kernels:
                row["baseline"][kernel] = _timed(
                    lambda k=kernel: baseline.Baseline(
                        baseline_shape(cfg, k),
                        synthetic_batches(cfg.vocab_size, batch, cfg.seq_len),
                        **baseline_optimizer(task.optimizer),
                    ),
                    args.steps,
                    flops,
                    peak["flops"],
                )
                print(_line(f"baseline {kernel}", batch, remat, row["baseline"][kernel]))
            rows.append(row)
    return {
        "kind": "accelerator",
        "machine": {
            "device": f"{device.platform}: {device.device_kind}",
            "devices_used": 1,
            "jax": jax.__version__,
            "jaxlib": jax.lib.__version__ if hasattr(jax.lib, "__version__") else None,
            "libtpu": _version("libtpu"),
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "dry_run": args.dry_run,
        },
        **info,
        "steps": args.steps,
        "peak": peak,
        "measured_matmul_flops": measured_peak,
        "rows": rows,
    }


def kernel_of(experiment) -> str:
    """The attention kernel the experiment's model runs here: `auto` resolved."""
    return "splash" if TransformerLm(experiment.task().model).splash_attention else "xla"


def _line(label: str, batch: int, remat: str, r: dict) -> str:
    where = f"batch {batch:3d}  remat {remat:34s}"
    if "oom" in r:
        return f"{label:18s} {where} out of memory: {r['oom'][:120]}"
    return (
        f"{label:18s} {where} step {r['step_s'] * 1e3:8.1f} ms  MFU {100 * r['mfu']:5.1f}% "
        f"(causal half {100 * r['mfu_causal_half']:5.1f}%)  loss {r['loss']:.3f}  "
        f"(compile + first step {r['compile_and_first_step_s']:.0f} s)"
    )


def summary(result: dict) -> str:
    """Best MFU, and trainer / baseline step time per (batch, remat) at each kernel both ran,
    against the targets."""
    lines, best = [], None
    for row in result["rows"]:
        for kernel, r in row["trainer"].items():
            if "oom" in r:
                continue
            if best is None or r["mfu"] > best[0]["mfu"]:
                best = (r, row["batch"], row["remat"], kernel)
            base = row["baseline"].get(kernel, {"oom": "not run"})
            ratio = "n/a" if "oom" in base else f"{r['step_s'] / base['step_s']:.3f}"
            lines.append(
                f"  batch {row['batch']:3d} remat {row['remat']:34s} attention {kernel:6s} "
                f"trainer / baseline {ratio} at the same kernel (target <= {RATIO_GOAL:.2f})"
            )
    if best:
        r, batch, remat, kernel = best
        lines.append(
            f"best MFU {100 * r['mfu']:.1f}% (causal attention at half: "
            f"{100 * r['mfu_causal_half']:.1f}%) (batch {batch}, remat {remat}, attention "
            f"{kernel}; target >= {100 * MFU_GOAL:.0f}% against the table peak)"
        )
    return "\n".join(lines)


# What results joined into one record must share: the same chip, software and model.
_SAME_MACHINE = ("device", "jax", "jaxlib", "libtpu")


def joined(results: list) -> dict:
    """One record from runs that measured different settings on the same device and versions
    (a host's time limit can split the settings over runs): their rows in batch order, each
    run's command, and the lower of the runs' matmul figures."""
    first = results[0]
    for other in results[1:]:
        for key in _SAME_MACHINE:
            if other["machine"].get(key) != first["machine"].get(key):
                raise ValueError(
                    f"the results differ in {key} ({first['machine'].get(key)} and "
                    f"{other['machine'].get(key)}): one record is one device and versions"
                )
        for key in ("model", "steps", "peak"):
            if other[key] != first[key]:
                raise ValueError(f"the results differ in {key}: one record is one model")
    rows = sorted((row for r in results for row in r["rows"]), key=lambda row: row["batch"])
    settings = [(row["batch"], row["remat"]) for row in rows]
    repeated = sorted({s for s in settings if settings.count(s) > 1})
    if repeated:
        raise ValueError(f"more than one result for batch, remat {repeated}")
    return {
        **first,
        "machine": {**first["machine"], "date": max(r["machine"]["date"] for r in results)},
        "measured_matmul_flops": min(r["measured_matmul_flops"] for r in results),
        "rows": rows,
        "command": " && ".join(r["command"] for r in results),
    }


def main(argv=None) -> int:
    parser = ExitingArgumentParser(
        prog="python -m benchmarks.tpu_bench", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--batch", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--remat", nargs="+", default=["full", "dots_with_no_batch_dims_saveable"])
    parser.add_argument(
        "--attention", nargs="+", default=["auto"], choices=("auto", "xla", "splash")
    )
    parser.add_argument("--steps", type=int, default=10, help="timed steps per setting")
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny size: checks the script")
    parser.add_argument("--profile", action="store_true", help="trace the first setting instead")
    figures.add_json_flag(parser)
    parser.add_argument(
        "--record",
        action="store_true",
        help=f"also store them in {BENCH_JSON.relative_to(ROOT)} (replacing the same device's) "
        "and rewrite the accelerator table of docs/benchmarks.md",
    )
    parser.add_argument(
        "--record-json",
        metavar="FILE",
        nargs="+",
        help="measure nothing: store what a run on an accelerator host wrote with --json "
        "(copied back to this checkout) as --record would; several files of one device and "
        "versions (settings split over runs) make one record",
    )
    args = parser.parse_args(argv)
    if args.record_json:
        results = []
        for path in args.record_json:
            with open(path) as f:
                result = json.load(f)
            if result.get("kind") != "accelerator" or result["machine"].get("dry_run"):
                parser.error(f"{path} is not a tpu_bench result from an accelerator")
            results.append(result)
        try:
            result = joined(results)
        except ValueError as err:
            parser.error(str(err))
        record_accelerator(result)
        print(summary(result))
        print(f"recorded {result['machine']['device']} in {BENCH_JSON.relative_to(ROOT)}")
        return 0
    device = jax.devices()[0]
    if device.platform == "cpu" and not args.dry_run:
        print(
            "tpu_bench: error: no accelerator here (device 0 is cpu); run it on a TPU, or pass "
            "--dry-run to check the script on CPU",
            file=sys.stderr,
        )
        return 2
    print(f"tpu_bench: jax {jax.__version__}, {device.platform} ({device.device_kind})", flush=True)
    if args.profile:
        shape = DRY_RUN_SHAPE if args.dry_run else SHAPE
        exp = compiled_step.one_device(
            EXPERIMENT,
            args.batch[0],
            REMAT_POLICY=args.remat[0],
            ATTENTION_KERNEL=args.attention[0],
            **shape,
        )
        trainer = compiled_step.CompiledStep(exp, jax.devices()[:1])
        task = trainer.run.task
        cfg = task.model
        mine = profile.op_times(trainer.compiled.as_text(), trainer.interval, args.steps)
        trainer = None
        gc.collect()
        base = baseline.Baseline(
            baseline_shape(cfg, kernel_of(exp)),
            synthetic_batches(cfg.vocab_size, args.batch[0], cfg.seq_len),
            **baseline_optimizer(task.optimizer),
        )
        theirs = profile.op_times(profile.loop_hlo(base), base.interval, args.steps)
        print(profile.report(mine, theirs))
        return 0
    result = measure(args)
    shown = list(argv if argv is not None else sys.argv[1:])
    if "--json" in shown:  # where this run's copy went is nobody else's business
        del shown[shown.index("--json") : shown.index("--json") + 2]
    shown = [a for a in shown if a != "--record" and not a.startswith("--json=")]
    result["command"] = " ".join(["python -m benchmarks.tpu_bench", *shown])
    figures.write_json(args.json, result)
    print(summary(result))
    if args.record and not args.dry_run:
        record_accelerator(result)
        print(f"recorded in {BENCH_JSON.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
