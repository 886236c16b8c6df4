#!/usr/bin/env bash
# FP8 check for a machine with one Hopper GPU, in under 8 minutes: a few steps of a 1B model
# (C4Spmd1BAdam4Replicas) in BF16 and in FP8 with step time, tokens/s, MFU and the speed-up,
# and the count of cuBLASLt FP8 GEMMs in the FP8 step's optimized HLO (pax/tools/fp8_check.py).
# Without a GPU it runs the tiny model on CPU end to end and says that no GPU is present.
#
#   ci/gpu_check.sh [RELEASE] [-- FLAGS]   # FLAGS go to pax.tools.fp8_check (--steps, --batch)
#   docker run --rm --gpus all --entrypoint python pax:1.4.0-gpu -m pax.tools.fp8_check
#
# Python: $PAX_PYTHON if set; else the release's pinned env .venv/pax-<RELEASE>-gpu (-cpu on a
# machine without an NVIDIA GPU), built by ./noxw from releases/<RELEASE>/<platform>.txt and
# checked against that lock here. Nothing is installed or fetched. XLA_FLAGS: the GPU image's
# defaults (read from Dockerfile.gpu) unless set. RELEASE defaults to the newest cut release.
# Exit: 0 OK, 1 check failed (or ran past $PAX_GPU_CHECK_TIMEOUT_S, default 480), 2 usage.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "gpu_check: $*" >&2; exit 2; }

RELEASE=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then RELEASE="$1"; shift; fi
if [ $# -gt 0 ] && [ "$1" = "--" ]; then shift; fi
if [ -z "$RELEASE" ]; then
  RELEASE="$(find "$ROOT/releases" -mindepth 2 -maxdepth 2 -name release.toml -printf '%h\n' \
             | xargs -rn1 basename | grep -E '^[0-9]+(\.[0-9]+)*$' | sort -V | tail -n1)"
  [ -n "$RELEASE" ] || die "no cut release under $ROOT/releases"
fi
RELEASE="${RELEASE#[vr]}"
[ -f "$ROOT/releases/$RELEASE/release.toml" ] \
  || die "unknown release '$RELEASE'; known:" \
         "$(ls "$ROOT/releases" | grep -E '^[0-9.]+$' | tr '\n' ' ')"

if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then PLATFORM=gpu; else PLATFORM=cpu; fi

if [ -n "${PAX_PYTHON:-}" ]; then
  PYTHON="$PAX_PYTHON"
else
  ENV_DIR="$ROOT/.venv/pax-$RELEASE-$PLATFORM"
  LOCK="$ROOT/releases/$RELEASE/$PLATFORM.txt"
  [ -x "$ENV_DIR/bin/python" ] \
    || die "no $PLATFORM env for release $RELEASE at $ENV_DIR; build it with" \
           "'./noxw -s train -- $RELEASE $PLATFORM' (it builds the env first), or set PAX_PYTHON"
  # The env's identity file names its release and lock (the manifest reads it); `pax env`
  # exits 0 only when the env is exactly that lock.
  (cd "$ROOT" && "$ENV_DIR/bin/python" -m pax env >/dev/null) \
    && [ "$("$ENV_DIR/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["lock_sha256"])' \
          < "$ENV_DIR/pax-env.json")" = "$(sha256sum "$LOCK" | cut -d' ' -f1)" ] \
    || die "$ENV_DIR does not match $LOCK ('cd $ROOT && $ENV_DIR/bin/python -m pax env' says" \
           "how); rebuild it: rm -r $ENV_DIR && ./noxw -s train -- $RELEASE $PLATFORM"
  PYTHON="$ENV_DIR/bin/python"
fi

if [ -z "${XLA_FLAGS+x}" ]; then
  XLA_FLAGS="$(sed -n 's/^ *XLA_FLAGS="\([^"]*\)".*/\1/p' "$ROOT/Dockerfile.gpu")"
  [ -n "$XLA_FLAGS" ] || die "no XLA_FLAGS default found in $ROOT/Dockerfile.gpu"
  export XLA_FLAGS
fi
echo "gpu_check: release $RELEASE, platform $PLATFORM, python $PYTHON"
echo "gpu_check: XLA_FLAGS=$XLA_FLAGS"
cd "$ROOT"
status=0
PYTHONPATH="$ROOT" timeout "${PAX_GPU_CHECK_TIMEOUT_S:-480}" "$PYTHON" -m pax.tools.fp8_check "$@" \
  || status=$?
if [ "$status" -eq 124 ]; then
  echo "gpu_check: FAILED: ran past ${PAX_GPU_CHECK_TIMEOUT_S:-480} s" >&2
  exit 1
fi
exit "$status"
