#!/usr/bin/env bash
# Install the image tools the project builds with, from Debian's packages, when missing:
#   buildah             the image builder (pax/images/buildah.py): dated layers, no history
#   mmdebstrap          the base image's root file system, byte for byte the same for the same
#                       package set (ci/base-image.sh)
#   diffoscope-minimal  names the files that differ between two builds (./noxw -s verify)
#
#   ci/image-tools.sh
set -euo pipefail

die() { echo "image-tools: $*" >&2; exit 1; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@";
  else die "need root to run: $*"; fi
}

missing=()
command -v buildah >/dev/null 2>&1 || missing+=(buildah)
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
command -v diffoscope >/dev/null 2>&1 || missing+=(diffoscope-minimal)
# buildah runs each step in runc with no network (--isolation oci --network none).
command -v runc >/dev/null 2>&1 || missing+=(runc)
[ "${#missing[@]}" -eq 0 ] && exit 0
command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and apt-get is unavailable"
echo "image-tools: installing Debian's ${missing[*]}" >&2
as_root apt-get update -q >/dev/null
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  "${missing[@]}" >/dev/null
