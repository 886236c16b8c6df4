# Sourced by ci/gpu_check.sh and ci/gpu_bench.sh: picks the release's pinned Python.
#
# In: ROOT, TOOL (the caller's name, for messages), die(), and the caller's "$@" after its own options ([RELEASE] [-- FLAGS]); with
# PAX_FORCE_CPU=1 the cpu env even where a GPU is present (gpu_bench.sh --dry-run); with
# WANT_PLATFORM=gpu the gpu env whatever the machine, built from its lock when missing.
# Out: RELEASE, PLATFORM, PYTHON, exported XLA_FLAGS, and ARGS (the FLAGS after `--`).
#
# Python: $PAX_PYTHON if set; else the release's pinned env .venv/pax-<RELEASE>-gpu (-cpu on a
# machine without an NVIDIA GPU), built by ./noxw from releases/<RELEASE>/<platform>.txt and
# checked against that lock here. Nothing is installed or fetched, but the env WANT_PLATFORM
# names where it is missing. XLA_FLAGS: the GPU image's defaults (pax/launch/xla_flags.py),
# then the caller's XLA_FLAGS, whose flags win (XLA takes a flag's last value). RELEASE defaults
# to the newest cut release.

RELEASE=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then RELEASE="$1"; shift; fi
if [ $# -gt 0 ] && [ "$1" = "--" ]; then shift; fi
ARGS=("$@")
if [ -z "$RELEASE" ]; then
  RELEASE="$(find "$ROOT/releases" -mindepth 2 -maxdepth 2 -name release.toml -printf '%h\n' \
             | xargs -rn1 basename | grep -E '^[0-9]+(\.[0-9]+)*$' | sort -V | tail -n1)"
  [ -n "$RELEASE" ] || die "no cut release under $ROOT/releases"
fi
RELEASE="${RELEASE#[vr]}"
[ -f "$ROOT/releases/$RELEASE/release.toml" ] \
  || die "unknown release '$RELEASE'; known:" \
         "$(ls "$ROOT/releases" | grep -E '^[0-9.]+$' | tr '\n' ' ')"

PLATFORM=cpu
if [ "${PAX_FORCE_CPU:-0}" != 1 ] && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  PLATFORM=gpu
fi
PLATFORM="${WANT_PLATFORM:-$PLATFORM}"

if [ -n "${PAX_PYTHON:-}" ]; then
  PYTHON="$PAX_PYTHON"
else
  ENV_DIR="$ROOT/.venv/pax-$RELEASE-$PLATFORM"
  LOCK="$ROOT/releases/$RELEASE/$PLATFORM.txt"
  if [ -n "${WANT_PLATFORM:-}" ] && [ ! -x "$ENV_DIR/bin/python" ]; then
    echo "$TOOL: no $PLATFORM env for release $RELEASE: building it from $LOCK (./noxw -s env)"
    (cd "$ROOT" && ./noxw -s env -- "$RELEASE" "$PLATFORM" >/dev/null) \
      || die "could not build $ENV_DIR from $LOCK ('./noxw -s env -- $RELEASE $PLATFORM' says why)"
  fi
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

GPU_XLA_FLAGS="$(cd "$ROOT" && PYTHONPATH="$ROOT" "$PYTHON" -m pax.launch.xla_flags)"
[ -n "$GPU_XLA_FLAGS" ] || die "no XLA_FLAGS default from pax/launch/xla_flags.py"
case "${XLA_FLAGS-}" in
  "$GPU_XLA_FLAGS"*) ;;  # started from a gpu session, which set them already
  *) XLA_FLAGS="$GPU_XLA_FLAGS${XLA_FLAGS:+ $XLA_FLAGS}" ;;
esac
export XLA_FLAGS
echo "$TOOL: release $RELEASE, platform $PLATFORM, python $PYTHON"
echo "$TOOL: XLA_FLAGS=$XLA_FLAGS"
