#!/usr/bin/env bash
# Build the local base image pax-base:$PAX_BASE_SUITE when it is absent (no registry needed):
# bookworm (python3 3.11, the default) for releases on Python 3.11, trixie (python3 3.13) for
# releases on 3.12 and later (pax.releases.catalog.BASE_SUITES).
#
#   ci/base-image.sh              # build pax-base:bookworm if missing
#   PAX_BASE_SUITE=trixie ci/base-image.sh   # pax-base:trixie, the same way
#   ci/base-image.sh --force      # rebuild
#   ci/base-image.sh --save FILE  # keep the base as an archive (docker save): a release's
#                                 # images are built only on the base it records, by ID
#   ci/base-image.sh --load FILE  # bring a kept base back, same ID, into the Docker engine and
#                                 # buildah's store under $PAX_BASE_IMAGE (default pax-base:$SUITE)
#   PAX_BASE_ARCHIVE=FILE ci/base-image.sh   # --load FILE instead of building (CI, after a
#                                            # Debian point release: the recorded base)
#
# mmdebstrap makes a minimal Debian of the suite (its python3 is the images' interpreter) as a
# tarball that is the same bytes for the same package set: files dated PAX_BASE_EPOCH (default the
# suite's release day), the host's hostname and resolv.conf left out. buildah turns it into an
# image with the same date and no history, so the image ID names the package set: two machines
# that fetch the same packages get the same ID, and a Debian point release gives a new one. The
# image lands in buildah's store (which `./noxw -s build` builds from, pinned by ID) and in the
# Docker engine. Users with a registry can skip this and pass --base-image
# python:3.11-slim-bookworm (or python:3.13-slim-trixie) instead.
set -euo pipefail
if [ -z "${1:-}" ] && [ -n "${PAX_BASE_ARCHIVE:-}" ]; then set -- --load "$PAX_BASE_ARCHIVE"; fi
FILE="${2:+$(realpath -m -- "$2")}"  # --save/--load FILE, named from the caller's directory
cd "$(dirname "$0")/.."

SUITE="${PAX_BASE_SUITE:-bookworm}"
IMAGE="${PAX_BASE_IMAGE:-pax-base:$SUITE}"
MIRROR="${PAX_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
case "$SUITE" in  # each suite's release day
  bookworm) RELEASED=1686355200 ;;  # 2023-06-10, python3 3.11
  trixie) RELEASED=1754697600 ;;    # 2025-08-09, python3 3.13
  *) RELEASED="" ;;
esac
EPOCH="${PAX_BASE_EPOCH:-$RELEASED}"
ROOT="${PAX_BUILDAH_ROOT:-/var/tmp/pax-buildah}"

die() { echo "base-image: $*" >&2; exit 1; }
usage() { echo "base-image: usage: $*" >&2; exit 2; }
buildah_() { buildah --root "$ROOT" --runroot "$ROOT/run" --storage-driver vfs "$@"; }

[ -n "$EPOCH" ] || usage "PAX_BASE_SUITE=$SUITE is neither bookworm nor trixie; give its date too: PAX_BASE_EPOCH=SECONDS"
docker info >/dev/null 2>&1 || die "no Docker engine answers; run ci/docker-engine.sh start"
ci/image-tools.sh

case "${1:-}" in
  --save)
    [ -n "$FILE" ] || usage "ci/base-image.sh --save FILE"
    docker image inspect "$IMAGE" >/dev/null 2>&1 || die "no $IMAGE in the Docker engine to save; run ci/base-image.sh"
    docker save -o "$FILE.part" "$IMAGE" && mv "$FILE.part" "$FILE"
    echo "base-image: saved $IMAGE $(docker image inspect -f '{{.Id}}' "$IMAGE") to $FILE" >&2
    exit 0 ;;
  --load)
    [ -f "$FILE" ] || usage "ci/base-image.sh --load FILE (an archive ci/base-image.sh --save wrote)"
    loaded="$(docker load -q -i "$FILE")" || die "docker load of $FILE failed"
    ref="$(sed -n 's/^Loaded image\( ID\)\?: //p' <<<"$loaded" | tail -n 1)"
    id="$(docker image inspect -f '{{.Id}}' "$ref")" || die "docker load of $FILE gave no image"
    docker tag "$id" "$IMAGE"
    # The same config bytes in buildah's store give the same ID; the name moves to it.
    stored="sha256:$(buildah_ pull --quiet "docker-archive:$FILE")" || die "buildah could not read $FILE"
    [ "$stored" = "$id" ] || die "$FILE is $id in Docker but $stored in buildah's store"
    buildah_ tag "$id" "$IMAGE"
    echo "base-image: loaded $IMAGE $id from $FILE" >&2
    exit 0 ;;
  ""|--force) ;;
  *) usage "ci/base-image.sh [--force | --save FILE | --load FILE], not $1" ;;
esac

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
