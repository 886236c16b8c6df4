"""The XLA flags a GPU run of pax starts with: the one list the gpu env's sessions
(pax.environments.venv), Dockerfile.gpu, the cluster templates (pax.launch), ci/pinned-python.sh
and the docs take them from.

    python -m pax.launch.xla_flags          the XLA_FLAGS value, one line

Every flag exists in the XLA of the pinned jaxlib on CPU as well, where XLA aborts on an
unknown flag, so the same value is safe on a GPU image's CPU fallback (and in the tests, which
add their virtual CPU devices to it). Where pax starts the process (the sessions, the ci scripts,
the Slurm script) a user's own XLA_FLAGS come after these (`with_user_flags`): XLA takes the last
value of a flag given twice, so theirs win flag by flag. The image's ENV is Docker's: `docker
run -e XLA_FLAGS=...` replaces the whole value.
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


def with_user_flags(user: str | None) -> str:
    """XLA_FLAGS for a GPU process: these, then `user`'s (the environment's XLA_FLAGS), which
    win where they set a flag again. A value that already starts with these is kept as it is, so
    a process started from a session that set them does not repeat them."""
    user = (user or "").strip()
    if user.startswith(value()):
        return user
    return f"{value()} {user}".strip()


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
