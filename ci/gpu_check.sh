#!/usr/bin/env bash
# FP8 check for a machine with one Hopper GPU, in under 8 minutes: a few steps of a 1B model
# (C4Spmd1BAdam4Replicas) in BF16 and in FP8 with step time, tokens/s, MFU and the speed-up,
# and the count of cuBLASLt FP8 GEMMs in the FP8 step's optimized HLO (pax/train/fp8_check.py).
# Without a GPU it runs the tiny model on CPU end to end and says that no GPU is present.
# With `-- --target h100` (h200, a100) it compiles both steps for that GPU with the CUDA compiler
# of the release's gpu env, on any machine, GPU or not: the FP8 GEMMs XLA chose, no speed.
#
#   ci/gpu_check.sh [RELEASE] [-- FLAGS]   # FLAGS go to pax.train.fp8_check (--steps, --batch, --target)
#   docker run --rm --gpus all --entrypoint python pax:1.4.0-gpu -m pax.train.fp8_check
#   docker run --rm --entrypoint python pax:1.4.0-gpu -m pax.train.fp8_check --target h100
#
# Python and XLA_FLAGS: ci/pinned-python.sh (the release's pinned env, or $PAX_PYTHON; with
# --target the gpu env, built from the release's gpu lock when missing).
# Exit: 0 OK, 1 check failed (or ran past $PAX_GPU_CHECK_TIMEOUT_S, default 480), 2 usage (and
# a --target without FP8 tensor cores).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOL=gpu_check
die() { echo "$TOOL: $*" >&2; exit 2; }

for arg in "$@"; do
  case "$arg" in --target | --target=*) WANT_PLATFORM=gpu ;; esac
done
# shellcheck source=ci/pinned-python.sh
. "$ROOT/ci/pinned-python.sh"
set -- "${ARGS[@]}"
cd "$ROOT"
status=0
PYTHONPATH="$ROOT" timeout "${PAX_GPU_CHECK_TIMEOUT_S:-480}" "$PYTHON" -m pax.train.fp8_check "$@" \
  || status=$?
if [ "$status" -eq 124 ]; then
  echo "gpu_check: FAILED: ran past ${PAX_GPU_CHECK_TIMEOUT_S:-480} s" >&2
  exit 1
fi
exit "$status"
