"""FP8 check: BF16 against FP8 training on this machine's first device, and XLA's FP8 GEMMs.

  python -m pax.train.fp8_check [--steps N] [--exp NAME] [--batch B]    (ci/gpu_check.sh)

On a GPU it trains a few steps of C4Spmd1BAdam4Replicas (13 × 2560, 1.0B parameters, synthetic
tokens, one device) with bf16 activations, once plain and once with USE_FP8, and prints step
time, tokens/s and MFU of each, the FP8 speed-up, and how many cuBLASLt FP8 GEMMs
(`__cublas$lt$matmul$f8` custom calls) XLA put into the FP8 step's optimized HLO; it fails when
a Hopper-class GPU (compute capability >= 8.9) got none. Without a GPU it says so and runs the
same on LmCloudSpmdTiny, which checks the path end to end but says nothing about GPU speed.
MFU is against the dense BF16 peak (pax.train.mfu) for both; FP8's own peak is twice that.
"""

import argparse
import re
import sys

import jax
import numpy as np

from pax.errors import UsageError, report
from pax.experiments import registry
from pax.train import compiled_step, mfu
from pax.train import state as state_lib

GPU_EXPERIMENT = "C4Spmd1BAdam4Replicas"
CPU_EXPERIMENT = "LmCloudSpmdTiny"
F8_GEMM = "__cublas$lt$matmul$f8"
# Lowered (pre-optimization) dots with an FP8 operand: what the rewrite starts from.
_F8_DOT = re.compile(r"stablehlo\.dot_general.*tensor<[^>]*xf8E(4M3FN|5M2)>")
VARIANTS = (("bf16", False), ("fp8", True))


def measure(name: str, use_fp8: bool, steps: int, batch=None) -> dict:
    experiment = compiled_step.one_device(name, batch, USE_FP8=use_fp8)
    step = compiled_step.CompiledStep(experiment, jax.devices()[:1], steps + 1)
    hlo = step.compiled.as_text()
    step.interval(1)  # warm-up: first-run allocations, autotuning
    step_s = step.interval(steps)
    losses = step.losses
    run = step.run
    cfg = run.task.model
    tokens = run.global_batch * cfg.seq_len
    flops = mfu.flops_per_step(cfg, run.global_batch)
    peak = mfu.peak_flops(jax.devices()[:1], "bfloat16")
    return {
        "experiment": registry.name_of(registry.get(name)),
        "use_fp8": use_fp8,
        "params": state_lib.num_params(step.abstract),
        "model": cfg,
        "batch": run.global_batch,
        "tokens_per_step": tokens,
        "flops_per_step": flops,
        "peak": peak,
        "compile_s": step.compile_s,
        "step_s": step_s,
        "tokens_per_s": tokens / step_s,
        "mfu": flops / step_s / peak["flops"],
        "losses": losses,
        "f8_gemms": hlo.count(f'custom_call_target="{F8_GEMM}"'),
        "f8_dots_lowered": len(_F8_DOT.findall(step.lowered.as_text())),
    }


def _fp8_capable(device) -> bool:
    """FP8 tensor cores: compute capability 8.9 (Ada) or newer (Hopper is 9.0)."""
    capability = getattr(device, "compute_capability", None)
    return capability is not None and tuple(map(int, str(capability).split("."))) >= (8, 9)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--exp", help=f"default: {GPU_EXPERIMENT} on a GPU, {CPU_EXPERIMENT} otherwise"
    )
    parser.add_argument(
        "--steps", type=int, help="timed steps per variant (default: 10 on a GPU, 3 otherwise)"
    )
    parser.add_argument("--batch", type=int, help="per-device batch (default: the experiment's)")
    args = parser.parse_args(argv)
    device = jax.devices()[0]
    gpu = device.platform == "gpu"
    name = args.exp or (GPU_EXPERIMENT if gpu else CPU_EXPERIMENT)
    steps = args.steps or (10 if gpu else 3)
    print(
        f"pax fp8 check: jax {jax.__version__}, device 0 of {jax.device_count()}: "
        f"{device.platform} ({device.device_kind})",
        flush=True,
    )
    if not gpu:
        print(
            "NO GPU PRESENT: running the tiny model on CPU to check the FP8 path end to end "
            "(XLA emulates FP8); these figures say nothing about GPU speed.",
            flush=True,
        )
    try:
        results = [measure(name, use_fp8, steps, args.batch) for _, use_fp8 in VARIANTS]
    except UsageError as e:
        return report("pax fp8 check", e)
    r = results[0]
    c = r["model"]
    print(
        f"model: {r['experiment']}, {r['params'] / 1e9:.3f}B params ({c.num_layers} layers x "
        f"{c.model_dims}, FFN {c.hidden_dims}, {c.num_heads} heads), seq {c.seq_len}, "
        f"batch {r['batch']}, {r['tokens_per_step']} tokens/step, "
        f"{r['flops_per_step'] / 1e12:.3f} TFLOP/step; bf16 activations, synthetic tokens"
    )
    print(
        f"peak: {r['peak']['flops'] / 1e12:.3g} TFLOP/s ({r['peak']['source']}); MFU of both "
        f"variants is against it"
    )
    for (label, _), v in zip(VARIANTS, results):
        print(
            f"{label:5s} step {v['step_s'] * 1e3:9.1f} ms  {v['tokens_per_s']:12.0f} tokens/s  "
            f"MFU {100 * v['mfu']:5.1f}%  compile {v['compile_s']:5.1f} s  "
            f"loss {v['losses'][0]:.4f} -> {v['losses'][-1]:.4f} ({steps} timed steps)"
        )
    bf16, fp8 = results
    print(f"speed-up fp8 / bf16: {bf16['step_s'] / fp8['step_s']:.2f}x")
    print(
        f"FP8 GEMMs: {fp8['f8_gemms']} cuBLASLt f8 custom calls ({F8_GEMM}) in the FP8 step's "
        f"optimized HLO (bf16 step: {bf16['f8_gemms']}); {fp8['f8_dots_lowered']} FP8 "
        "dot_generals in its lowered program"
    )
    finite = all(np.isfinite(v["losses"]).all() for v in results)
    problems = [] if finite else ["a loss is not finite"]
    if not fp8["f8_dots_lowered"]:
        problems.append("the FP8 step has no FP8 dot_generals (USE_FP8 did not take effect)")
    if gpu and _fp8_capable(device) and not fp8["f8_gemms"]:
        problems.append(
            "XLA did not rewrite the FP8 dots into cuBLASLt FP8 GEMMs (check XLA_FLAGS: "
            "Dockerfile.gpu sets the defaults)"
        )
    if gpu and not _fp8_capable(device):
        print(
            f"note: {device.device_kind} has no FP8 tensor cores (compute capability < 8.9); XLA "
            "runs the FP8 dots at higher precision"
        )
    if not gpu:
        print("no GPU: cuBLASLt FP8 GEMMs and the speed-up were not measured")
    for p in problems:
        print(f"FAIL: {p}")
    print("OK" if not problems else "FAILED")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
