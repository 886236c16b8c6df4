#!/usr/bin/env bash
# GPU benchmark for one H100/H200, in under 8 minutes: the 1B config's train step
# (C4Spmd1BAdam4Replicas) in bf16 and FP8, step time, tokens/s, MFU against the chip's dense
# bf16 peak, the FP8/bf16 speed-up, and the independent baseline (benchmarks/baseline.py) at
# the same shapes on the same GPU (benchmarks/gpu_bench.py).
#
#   ci/gpu_bench.sh [RELEASE] [--dry-run] [-- FLAGS]   # FLAGS: --steps N, --batch B, --json F
#
# --dry-run runs the whole script on CPU at a tiny size (tests/benchmarks/test_bench.py runs it);
# without it and without a GPU it stops with exit 2.
# Python and XLA_FLAGS: ci/pinned-python.sh (the release's pinned env, or $PAX_PYTHON).
# Exit: 0 OK, 1 failed (or ran past $PAX_GPU_BENCH_TIMEOUT_S, default 480), 2 usage.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOL=gpu_bench
die() { echo "$TOOL: $*" >&2; exit 2; }

DRY=()
REST=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=(--dry-run); export PAX_FORCE_CPU=1 JAX_PLATFORMS=cpu; shift ;;
    --) REST+=("$@"); break ;;
    -*) die "unknown option '$1'; usage: ci/gpu_bench.sh [RELEASE] [--dry-run] [-- FLAGS]" ;;
    *) REST+=("$1"); shift ;;
  esac
done
set -- "${REST[@]}"
# shellcheck source=ci/pinned-python.sh
. "$ROOT/ci/pinned-python.sh"
cd "$ROOT"
status=0
PYTHONPATH="$ROOT" timeout "${PAX_GPU_BENCH_TIMEOUT_S:-480}" \
  "$PYTHON" -m benchmarks.gpu_bench "${DRY[@]}" "${ARGS[@]}" || status=$?
if [ "$status" -eq 124 ]; then
  echo "$TOOL: FAILED: ran past ${PAX_GPU_BENCH_TIMEOUT_S:-480} s" >&2
  exit 1
fi
exit "$status"
