# Shell helpers sourced by ci/registry.sh and ci/slurm.sh; each sets NAME, the prefix of its
# messages, before sourcing.

die() { echo "$NAME: $*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@";
  else die "need root to run: $*"; fi
}

apt_install() {  # Debian packages, quietly
  as_root apt-get update -q >/dev/null
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
}
