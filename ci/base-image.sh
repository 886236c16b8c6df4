#!/usr/bin/env bash
# Build the local base image pax-base:bookworm when it is absent (no registry needed).
#
#   ci/base-image.sh            # build if missing
#   ci/base-image.sh --force    # rebuild
#
# mmdebstrap makes a minimal Debian bookworm (python3 is 3.11 there, matching the locks) as a
# tarball that is the same bytes for the same package set: files dated PAX_BASE_EPOCH, the host's
# hostname and resolv.conf left out. buildah turns it into an image with the same date and no
# history, so the image ID names the package set: two machines that fetch the same bookworm
# packages get the same ID, and a Debian point release gives a new one. The image lands in
# buildah's store (which `./noxw -s build` builds from, pinned by ID) and in the Docker engine.
# Users with a registry can skip this and pass --base-image python:3.11-slim-bookworm instead.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE="${PAX_BASE_IMAGE:-pax-base:bookworm}"
SUITE="${PAX_BASE_SUITE:-bookworm}"
MIRROR="${PAX_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
EPOCH="${PAX_BASE_EPOCH:-1686355200}"  # bookworm's release day, 2023-06-10
ROOT="${PAX_BUILDAH_ROOT:-/var/tmp/pax-buildah}"

die() { echo "base-image: $*" >&2; exit 1; }
buildah_() { buildah --root "$ROOT" --runroot "$ROOT/run" --storage-driver vfs "$@"; }

docker info >/dev/null 2>&1 || die "no Docker engine answers; run ci/docker-engine.sh start"
ci/image-tools.sh

if [ "${1:-}" != "--force" ] && buildah_ inspect --type image "$IMAGE" >/dev/null 2>&1 \
  && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "base-image: $IMAGE present ($(buildah_ inspect --type image --format '{{.FromImageID}}' "$IMAGE"))" >&2
  exit 0
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/pax-base.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

echo "base-image: mmdebstrap $SUITE from $MIRROR" >&2
# Nothing the trainer needs: docs (but their copyright files), man pages, locales.
SOURCE_DATE_EPOCH="$EPOCH" mmdebstrap --quiet --variant=minbase \
  --include=python3,python3-venv,ca-certificates \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --customize-hook='rm -f "$1/etc/hostname" "$1/etc/resolv.conf"' \
  --format=tar "$SUITE" "$WORK/rootfs.tar" "$MIRROR" 2>"$WORK/mmdebstrap.log" \
  || { tail -n 20 "$WORK/mmdebstrap.log" >&2; die "mmdebstrap failed"; }

cat >"$WORK/Containerfile" <<EOF
FROM scratch
ADD rootfs.tar /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
LABEL org.opencontainers.image.description="mmdebstrap $SUITE minbase with python3"
CMD ["python3"]
EOF
buildah_ bud --quiet --layers=false --timestamp "$EPOCH" --omit-history \
  -f "$WORK/Containerfile" -t "$IMAGE" "$WORK" >/dev/null
buildah_ push --quiet "$IMAGE" "docker-daemon:$IMAGE" >/dev/null
echo "base-image: built $IMAGE $(docker image inspect -f '{{.Id}}' "$IMAGE")" \
  "($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes, rootfs sha256" \
  "$(sha256sum "$WORK/rootfs.tar" | cut -d' ' -f1))" >&2
