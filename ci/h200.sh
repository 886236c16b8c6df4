#!/usr/bin/env bash
# The GPU record in one device call of under 9 minutes, on the H200 machine's own Python and
# JAX (not a release's lock): benchmarks/gpu_record.py's stages, the record under $OUT.
#
#   ci/h200.sh [--wheels DIR] [--dry-run] [-- FLAGS]   # FLAGS: --out DIR, --stages NAME ...
#
# --wheels DIR installs the wheels ci/h200-wheels.sh wrote (what the machine lacks) under a
# temporary folder put last on PYTHONPATH, so the machine's own JAX stays first. --dry-run runs
# it all on CPU at a tiny size (tests/benchmarks/test_gpu_record.py runs it).
# Python: $PAX_PYTHON, else python3; XLA_FLAGS: ci/pinned-python.sh (pax/launch/xla_flags.py).
# Exit: 0 OK, 1 a stage failed (or ran past $PAX_GPU_RECORD_TIMEOUT_S, default 560), 2 usage.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOL=h200
die() { echo "$TOOL: $*" >&2; exit 2; }

DRY=()
WHEELS=""
REST=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=(--dry-run); export PAX_FORCE_CPU=1 JAX_PLATFORMS=cpu; shift ;;
    --wheels) [ $# -ge 2 ] || die "--wheels needs a folder"; WHEELS="$2"; shift 2 ;;
    --) REST+=("$@"); break ;;
    *) die "unknown option '$1'; usage: ci/h200.sh [--wheels DIR] [--dry-run] [-- FLAGS]" ;;
  esac
done
set -- "${REST[@]}"
export PAX_PYTHON="${PAX_PYTHON:-python3}"
# shellcheck source=ci/pinned-python.sh
. "$ROOT/ci/pinned-python.sh"
cd "$ROOT"
if [ -n "$WHEELS" ]; then
  ls "$WHEELS"/*.whl >/dev/null 2>&1 || die "no wheels in '$WHEELS'; ci/h200-wheels.sh writes them"
  SITE="$(mktemp -d)"
  PIP_CONFIG_FILE=/dev/null "$PYTHON" -m pip install --isolated -q --no-index --no-deps \
    --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl \
    || die "could not install the wheels of '$WHEELS' (pip says why above)"
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$SITE"
fi
status=0
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 \
  timeout "${PAX_GPU_RECORD_TIMEOUT_S:-560}" \
  "$PYTHON" -m benchmarks.gpu_record "${DRY[@]}" "${ARGS[@]}" || status=$?
if [ "$status" -eq 124 ]; then
  echo "$TOOL: FAILED: ran past ${PAX_GPU_RECORD_TIMEOUT_S:-560} s" >&2
  exit 1
fi
exit "$status"
