#!/usr/bin/env bash
# Build the local base image pax-base:bookworm when it is absent (no registry needed).
#
#   ci/base-image.sh            # build if missing
#   ci/base-image.sh --force    # rebuild
#
# debootstrap a minimal Debian bookworm (python3 is 3.11 there, matching the locks) and
# import it as an image. Users with a registry can skip this and pass
# --build-arg BASE_IMAGE=python:3.11-slim instead.
set -euo pipefail

IMAGE="${PAX_BASE_IMAGE:-pax-base:bookworm}"
SUITE="${PAX_BASE_SUITE:-bookworm}"
MIRROR="${PAX_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

die() { echo "base-image: $*" >&2; exit 1; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@";
  else die "need root to run: $*"; fi
}

docker info >/dev/null 2>&1 || die "no Docker engine answers; run ci/docker-engine.sh start"

if [ "${1:-}" != "--force" ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "base-image: $IMAGE present" >&2
  exit 0
fi

if ! command -v debootstrap >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || die "debootstrap is missing and apt-get is unavailable"
  echo "base-image: installing debootstrap" >&2
  as_root apt-get update -q >/dev/null
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/pax-base.XXXXXX")"
cleanup() { as_root rm -rf "$WORK"; }
trap cleanup EXIT
ROOTFS="$WORK/rootfs"

echo "base-image: debootstrap $SUITE from $MIRROR" >&2
as_root debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
  "$SUITE" "$ROOTFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
  || { tail -n 20 "$WORK/debootstrap.log" >&2; die "debootstrap failed"; }

# Nothing the trainer needs: package lists, caches, docs, man pages, locales.
as_root rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin \
  "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* \
  "$ROOTFS"/usr/share/info/* "$ROOTFS"/var/log/*.log "$ROOTFS"/debootstrap
find "$ROOTFS/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'locale.alias' -exec rm -rf {} + 2>/dev/null || true

created="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
as_root tar --numeric-owner -C "$ROOTFS" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  --change "LABEL org.opencontainers.image.created=$created" \
  --change "LABEL org.opencontainers.image.description=\"debootstrap $SUITE minbase with python3\"" \
  - "$IMAGE" >/dev/null
echo "base-image: built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes)" >&2
