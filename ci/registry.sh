#!/usr/bin/env bash
# Start or stop a throwaway image registry on 127.0.0.1 (Debian's docker-registry).
#
#   ci/registry.sh start [PORT]   # default PORT 5000; prints 127.0.0.1:PORT
#   ci/registry.sh stop           # stops only the registry this script started
#
# Docker treats 127.0.0.0/8 as an insecure registry, so plain HTTP on loopback works
# without engine configuration. Storage lives in a temporary directory removed by stop.
# PAX_REGISTRY_READONLY=1 starts a registry that refuses pushes (for error-path tests);
# PAX_REGISTRY_STATE_DIR runs a second instance beside the first.
set -euo pipefail

STATE_DIR="${PAX_REGISTRY_STATE_DIR:-/tmp/pax-registry}"
PIDFILE="$STATE_DIR/registry.pid"
WAIT_S="${PAX_REGISTRY_WAIT_S:-30}"

die() { echo "registry: $*" >&2; exit 1; }

answers() { python3 - "$1" <<'PY'
import sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v2/", timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

start() {
  local port="${1:-${PAX_REGISTRY_PORT:-5000}}"
  case "$port" in (*[!0-9]*|'') die "port must be a number, got '$port'";; esac
  mkdir -p "$STATE_DIR"
  if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    local old; old="$(cat "$STATE_DIR/port")"
    answers "$old" || die "registry pid $(cat "$PIDFILE") started earlier does not answer on 127.0.0.1:$old"
    echo "127.0.0.1:$old"; return 0
  fi
  if answers "$port"; then die "something else already answers on 127.0.0.1:$port; pick another port"; fi
  if ! command -v docker-registry >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || die "docker-registry is missing and apt-get is unavailable"
    echo "registry: installing Debian's docker-registry" >&2
    local sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -q >/dev/null
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker-registry >/dev/null
  fi
  local data="$STATE_DIR/data"
  rm -rf "$data"; mkdir -p "$data"
  cat >"$STATE_DIR/config.yml" <<YML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $data
  delete:
    enabled: true
$(if [ "${PAX_REGISTRY_READONLY:-0}" = 1 ]; then printf '  maintenance:\n    readonly:\n      enabled: true\n'; fi)
http:
  addr: 127.0.0.1:$port
YML
  (exec setsid docker-registry serve "$STATE_DIR/config.yml" </dev/null >"$STATE_DIR/registry.log" 2>&1) &
  echo $! >"$PIDFILE"
  echo "$port" >"$STATE_DIR/port"
  local i
  for ((i = 0; i < WAIT_S * 4; i++)); do
    if answers "$port"; then echo "registry: serving on 127.0.0.1:$port (pid $(cat "$PIDFILE"))" >&2; echo "127.0.0.1:$port"; return 0; fi
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      tail -n 20 "$STATE_DIR/registry.log" >&2 || true; rm -f "$PIDFILE"
      die "docker-registry exited during start-up"
    fi
    sleep 0.25
  done
  die "docker-registry did not answer on 127.0.0.1:$port within ${WAIT_S}s"
}

stop() {
  if [ ! -f "$PIDFILE" ]; then echo "registry: nothing started by this script" >&2; return 0; fi
  local pid; pid="$(cat "$PIDFILE")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    local i; for ((i = 0; i < 20; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" || true
  fi
  rm -rf "$PIDFILE" "$STATE_DIR/data" "$STATE_DIR/port"
  echo "registry: stopped (pid $pid)" >&2
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) stop ;;
  *) echo "usage: $0 start [PORT]|stop" >&2; exit 2 ;;
esac
