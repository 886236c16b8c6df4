#!/usr/bin/env bash
# The wheels an H200 machine's own Python lacks, for benchmarks/gpu_record.py (ci/h200.sh
# --wheels DIR installs them there): tensorboardX (the trainer's summaries) and grain (the C4
# input, which the accelerator tier imports) with their needs that its stack has not got, at
# the release's gpu lock versions, and jsonschema (a test imports it) at its test lock's, for
# CPython 3.12 on x86-64. Needs the network; run it here,
# then carry DIR (git-ignored; it and the tree must stay under the device's 64 MiB).
#
#   ci/h200-wheels.sh [RELEASE] [DIR]      # default: the newest cut release, .whl-h200
#
# Exit: 0 written, 1 a download failed, 2 usage.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "h200-wheels: $*" >&2; exit 2; }
RELEASE="${1:-$(find "$ROOT/releases" -mindepth 2 -maxdepth 2 -name release.toml -printf '%h\n' \
  | xargs -rn1 basename | grep -E '^[0-9]+(\.[0-9]+)*$' | sort -V | tail -n1)}"
DIR="${2:-$ROOT/.whl-h200}"
LOCK="$ROOT/releases/$RELEASE/gpu.txt"
[ -f "$LOCK" ] && [ -f "${LOCK%/*}/test.txt" ] || die "no gpu lock $LOCK; name a cut release"
# tensorboardX and grain, and what they need beyond the machine's list (shared/gpu/README.md).
NAMES=(tensorboardx grain array-record cloudpickle portpicker psutil
       jsonschema jsonschema-specifications referencing rpds-py attrs)
rm -rf "$DIR" && mkdir -p "$DIR"
for name in "${NAMES[@]}"; do
  version="$(grep -ihE "^$name==" "$LOCK" "${LOCK%/*}/test.txt" | head -n1 | sed -E 's/^[^=]+==([^ ;\\]+).*/\1/')"
  [ -n "$version" ] || die "$LOCK pins no $name"
  PIP_CONFIG_FILE=/dev/null python3 -m pip download -q --isolated --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$DIR" "$name==$version" \
    || { echo "h200-wheels: could not download $name==$version" >&2; exit 1; }
done
du -sh "$DIR"
