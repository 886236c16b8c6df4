"""FP8 check: BF16 against FP8 training on this machine's first device, and XLA's FP8 GEMMs.

  python -m pax.train.fp8_check [--steps N] [--exp NAME] [--batch B]    (ci/gpu_check.sh)
  python -m pax.train.fp8_check --target h100|h200|a100 [--exp NAME] [--batch B]

With --target it needs no GPU: the CUDA compiler of jax's plugin (the gpu env, the GPU image)
compiles the BF16 and FP8 train steps of C4Spmd1BAdam4Replicas for one such GPU on this CPU
(pax.parallel.gpu_targets), and it prints the GPU, the model's FP8 dense matmuls per step, each
step's GEMM calls and memory plan, and one line with the number of `__cublas$lt$matmul$f8` calls
in the FP8 step against its FP8 dot_generals. Exit 1 when XLA left any FP8 dot to another kernel
(XLA's default flags give them to Triton), 2 for a GPU without FP8 tensor cores (the A100).

On a GPU it trains a few steps of C4Spmd1BAdam4Replicas (13 × 2560, 1.0B parameters, synthetic
tokens, one device) with bf16 activations, once plain and once with USE_FP8, and prints step
time, tokens/s and MFU of each, the FP8 speed-up, and how many cuBLASLt FP8 GEMMs
(`__cublas$lt$matmul$f8` custom calls) XLA put into the FP8 step's optimized HLO; it fails when
a GPU with FP8 tensor cores (compute capability >= 8.9) got fewer than the step's FP8 dots. Without a GPU it says so and runs the
same on LmCloudSpmdTiny, which checks the path end to end but says nothing about GPU speed.
MFU is against the dense BF16 peak (pax.train.mfu) for both; FP8's own peak is twice that.
"""

import argparse
import re
import sys

from pax.errors import ExitingArgumentParser, UsageError, report
from pax.parallel import gpu_targets

GPU_EXPERIMENT = "C4Spmd1BAdam4Replicas"
CPU_EXPERIMENT = "LmCloudSpmdTiny"
F8_GEMM = "__cublas$lt$matmul$f8"
# Lowered (pre-optimization) dots with an FP8 operand: what the rewrite starts from.
_F8_DOT = re.compile(r"stablehlo\.dot_general.*tensor<[^>]*xf8E(4M3FN|5M2)>")
_GEMM = re.compile(r'custom_call_target="(__cublas\$(?:lt\$matmul|gemm)[^"]*)"')
VARIANTS = (("bf16", False), ("fp8", True))
PROGRAM = "pax fp8 check"


def f8_gemms(hlo: str) -> int:
    return hlo.count(f'custom_call_target="{F8_GEMM}"')


def f8_dots(lowered_text: str) -> int:
    return len(_F8_DOT.findall(lowered_text))


def measure(name: str, use_fp8: bool, steps: int, batch=None) -> dict:
    import jax

    from pax.experiments import registry
    from pax.train import compiled_step, mfu
    from pax.train import state as state_lib

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
        "optimizer": run.task.optimizer,
        "batch": run.global_batch,
        "tokens_per_step": tokens,
        "flops_per_step": flops,
        "peak": peak,
        "compile_s": step.compile_s,
        "step_s": step_s,
        "tokens_per_s": tokens / step_s,
        "mfu": flops / step_s / peak["flops"],
        "losses": losses,
        "f8_gemms": f8_gemms(hlo),
        "f8_dots_lowered": f8_dots(step.lowered.as_text()),
    }


def _fp8_capable(device) -> bool:
    """FP8 tensor cores: compute capability 8.9 (Ada) or newer (Hopper is 9.0)."""
    capability = getattr(device, "compute_capability", None)
    found = capability is not None and tuple(map(int, str(capability).split(".")))
    return bool(found) and found >= gpu_targets.FP8_CAPABILITY


def fp8_matmuls(abstract_state) -> int:
    """The model's FP8 einsums as it runs them forward: one `input_scale` per FP8 einsum, stacked
    once per layer (and stage) that runs it. Backward runs two per forward one (the input's and
    the weight's gradients)."""
    import jax

    from pax.models import fp8

    leaves = jax.tree_util.tree_leaves_with_path(abstract_state.get(fp8.OWG, {}))
    return sum(
        leaf.size for path, leaf in leaves if jax.tree_util.keystr(path[-1:]) == "['input_scale']"
    )


def _gemm_problems(fp8: dict, rewrite_expected: bool) -> list[str]:
    """What is wrong with the FP8 step's GEMMs: FP8 dots missing, or left to other kernels."""
    if not fp8["f8_dots_lowered"]:
        return ["the FP8 step has no FP8 dot_generals (USE_FP8 did not take effect)"]
    if rewrite_expected and fp8["f8_gemms"] < fp8["f8_dots_lowered"]:
        return [
            f"XLA rewrote {fp8['f8_gemms']} of the FP8 step's {fp8['f8_dots_lowered']} FP8 "
            "dot_generals into cuBLASLt FP8 GEMMs; the rest run as other kernels (check "
            "XLA_FLAGS: the gpu env's sessions, ci/gpu_check.sh and the image take theirs from "
            "pax/launch/xla_flags.py)"
        ]
    return []


def _verdict(problems: list[str]) -> int:
    for p in problems:
        print(f"FAIL: {p}")
    print("OK" if not problems else "FAILED")
    return 1 if problems else 0


def _parser() -> argparse.ArgumentParser:
    parser = ExitingArgumentParser(
        prog="python -m pax.train.fp8_check", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--target",
        help=f"compile for this GPU with the CUDA compiler, no GPU needed: one of "
        f"{', '.join(gpu_targets.names())} (default {GPU_EXPERIMENT})",
    )
    parser.add_argument(
        "--exp", help=f"default: {GPU_EXPERIMENT} on a GPU or --target, {CPU_EXPERIMENT} otherwise"
    )
    parser.add_argument(
        "--steps", type=int, help="timed steps per variant (default: 10 on a GPU, 3 otherwise)"
    )
    parser.add_argument("--batch", type=int, help="per-device batch (default: the experiment's)")
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if not args.target:
        return on_this_device(args)
    try:
        target = gpu_targets.get(args.target)
        if args.steps:
            raise UsageError("--steps times a GPU run; --target compiles only")
        if not target.fp8:
            print(
                f"{PROGRAM}: {target.describe()} has no FP8 tensor cores (compute capability "
                f"{'.'.join(map(str, gpu_targets.FP8_CAPABILITY))} or newer has): nothing to check"
            )
            return 2
        gpu_targets.compile_only()
    except UsageError as e:
        return report(PROGRAM, e)
    return compiled_for(target, args.exp or GPU_EXPERIMENT, args.batch)


def compiled_for(target, name: str, batch) -> int:
    """The FP8 and BF16 steps of `name` on one `target` GPU, compiled by the CUDA compiler here:
    the FP8 GEMMs XLA chose and each step's memory plan."""
    import os

    import jax

    print(
        f"{PROGRAM}: compile-only for {target.describe()} with the CUDA compiler of jax "
        f"{jax.__version__} (no GPU needed: speed and training numerics are not measured)",
        flush=True,
    )
    print(f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')}", flush=True)
    try:
        devices = gpu_targets.devices(target, 1)
        results = [_compile_step(name, use_fp8, batch, devices) for _, use_fp8 in VARIANTS]
    except UsageError as e:
        return report(PROGRAM, e)
    bf16, fp8 = results
    print(
        f"model: {fp8['experiment']}, {fp8['params'] / 1e9:.3f}B params, batch {fp8['batch']} "
        f"on one {target.device}; FP8 dense matmuls per step: {fp8['fp8_matmuls']} forward + "
        f"{2 * fp8['fp8_matmuls']} backward = {3 * fp8['fp8_matmuls']}"
    )
    for (label, _), v in zip(VARIANTS, results):
        gemms = ", ".join(f"{n} {k}" for k, n in sorted(v["gemms"].items())) or "none"
        print(
            f"{label:5s} compiled in {v['compile_s']:5.1f} s: GEMM calls {gemms}; memory plan "
            f"{v['plan_bytes'] / 2**30:.2f} GiB of {target.memory_bytes / 2**30:.1f} GiB"
        )
    print(
        f"{F8_GEMM}: {fp8['f8_gemms']} in the FP8 step, for its {fp8['f8_dots_lowered']} FP8 "
        f"dot_generals (one program per repeated layer body: the forward, its recomputation "
        f"and the backward); bf16 step: {bf16['f8_gemms']}"
    )
    return _verdict(_gemm_problems(fp8, rewrite_expected=True))


def _compile_step(name: str, use_fp8: bool, batch, devices) -> dict:
    import time

    from pax.experiments import registry
    from pax.train import compiled_step
    from pax.train import state as state_lib

    experiment = compiled_step.one_device(name, batch, USE_FP8=use_fp8)
    run, place, lowered = compiled_step.lower_for(experiment, devices)
    start = time.perf_counter()
    compiled = lowered.compile()
    seconds = time.perf_counter() - start
    hlo = compiled.as_text()
    gemms = {}
    for call in _GEMM.findall(hlo):
        gemms[call] = gemms.get(call, 0) + 1
    return {
        "experiment": registry.name_of(registry.get(name)),
        "params": state_lib.num_params(place.abstract, run.task.model),
        "batch": run.global_batch,
        "fp8_matmuls": fp8_matmuls(place.abstract),
        "compile_s": seconds,
        "gemms": gemms,
        "f8_gemms": f8_gemms(hlo),
        "f8_dots_lowered": f8_dots(lowered.as_text()),
        "plan_bytes": compiled_step.plan_bytes(compiled),
    }


def on_this_device(args) -> int:
    """BF16 against FP8 trained on this machine's first device."""
    import jax
    import numpy as np

    device = jax.devices()[0]
    gpu = device.platform == "gpu"
    name = args.exp or (GPU_EXPERIMENT if gpu else CPU_EXPERIMENT)
    steps = args.steps or (10 if gpu else 3)
    print(
        f"{PROGRAM}: jax {jax.__version__}, device 0 of {jax.device_count()}: "
        f"{device.platform} ({device.device_kind})",
        flush=True,
    )
    if not gpu:
        print(
            "NO GPU PRESENT: running the tiny model on CPU to check the FP8 path end to end "
            "(XLA emulates FP8); these figures say nothing about GPU speed (--target h100 "
            "compiles for a GPU with the CUDA compiler).",
            flush=True,
        )
    try:
        results = [measure(name, use_fp8, steps, args.batch) for _, use_fp8 in VARIANTS]
    except UsageError as e:
        return report(PROGRAM, e)
    _print_measured(results, steps)
    bf16, fp8 = results
    finite = all(np.isfinite(v["losses"]).all() for v in results)
    problems = [] if finite else ["a loss is not finite"]
    problems += _gemm_problems(fp8, rewrite_expected=gpu and _fp8_capable(device))
    if gpu and not _fp8_capable(device):
        print(
            f"note: {device.device_kind} has no FP8 tensor cores (compute capability < 8.9); XLA "
            "runs the FP8 dots at higher precision"
        )
    if not gpu:
        print("no GPU: cuBLASLt FP8 GEMMs and the speed-up were not measured")
    return _verdict(problems)


def _print_measured(results: list[dict], steps: int) -> None:
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


if __name__ == "__main__":
    sys.exit(main())
