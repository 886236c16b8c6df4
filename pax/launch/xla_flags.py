"""The XLA flags a GPU run of pax starts with: the one list Dockerfile.gpu, the cluster
templates (pax.launch), ci/pinned-python.sh and the docs take them from.

    python -m pax.launch.xla_flags          the XLA_FLAGS value, one line

Every flag exists in the XLA of the pinned jaxlib on CPU as well, where XLA aborts on an
unknown flag, so the same value is safe on a GPU image's CPU fallback. A user overrides them by
setting XLA_FLAGS (`docker run -e XLA_FLAGS=...`, or in the environment of a Slurm job).
"""

from __future__ import annotations

import textwrap

# (flag, why), in the order they are passed.
GPU_XLA_FLAGS: tuple[tuple[str, str], ...] = (
    (
        "--xla_gpu_enable_latency_hiding_scheduler=true",
        "overlap collectives with compute",
    ),
    (
        "--xla_gpu_enable_highest_priority_async_stream=true",
        "run collectives on a high-priority stream",
    ),
    (
        "--xla_gpu_enable_cublaslt=true",
        "GEMMs through cuBLASLt, which the FP8 (e4m3/e5m2 with scales) GEMM rewrite needs",
    ),
    (
        "--xla_gpu_enable_triton_gemm=false",
        "keep Triton from claiming the dots, so USE_FP8's quantize-dot-dequantize becomes a "
        "cuBLASLt FP8 GEMM",
    ),
)

# Markers of the generated copies (pax.releases.readme rewrites what lies between them).
DOCKERFILE_START = "# gpu-xla-flags:start"
DOCKERFILE_END = "# gpu-xla-flags:end"
DOCS_START = "<!-- gpu-xla-flags:start -->"
DOCS_END = "<!-- gpu-xla-flags:end -->"


def value() -> str:
    """The XLA_FLAGS value: the flags, space-separated."""
    return " ".join(flag for flag, _ in GPU_XLA_FLAGS)


def dockerfile_block() -> str:
    """Dockerfile.gpu's ENV line with a comment per flag."""
    width = max(len(flag) for flag, _ in GPU_XLA_FLAGS)
    lines = [
        "# XLA defaults for GPU runs, from pax/launch/xla_flags.py (`./noxw -s readme` rewrites",
        "# this block); override with -e XLA_FLAGS=...",
    ]
    for flag, why in GPU_XLA_FLAGS:
        wrapped = textwrap.wrap(why, 96 - width - 6)
        lines.append(f"#   {flag:<{width}}  {wrapped[0]}")
        lines += [f"#   {'':<{width}}  {more}" for more in wrapped[1:]]
    lines.append(f'ENV XLA_FLAGS="{value()}"')
    return "\n".join(lines)


def docs_table() -> str:
    """The flags as a markdown table, then the value to copy."""
    lines = ["| flag | why |", "|---|---|"]
    lines += [f"| `{flag}` | {why} |" for flag, why in GPU_XLA_FLAGS]
    lines += ["", "```sh", f'XLA_FLAGS="{value()}"', "```"]
    return "\n".join(lines)


if __name__ == "__main__":
    print(value())
