#!/usr/bin/env bash
# Start or stop a local Docker engine for builds and smoke runs.
#
#   ci/docker-engine.sh start   # install docker.io if missing, start dockerd if no engine answers
#   ci/docker-engine.sh stop    # stop the dockerd this script started (pidfile), nothing else
#   ci/docker-engine.sh status
#
# The engine runs without a bridge, iptables rules or masquerading: containers use
# `--network none` (hermetic builds, smoke runs) or `--network host`. Never create bridge
# networks here.
set -euo pipefail

STATE_DIR="${PAX_ENGINE_STATE_DIR:-/tmp/pax-docker-engine}"
PIDFILE="$STATE_DIR/dockerd.pid"
LOGFILE="$STATE_DIR/dockerd.log"
WAIT_S="${PAX_ENGINE_WAIT_S:-60}"

die() { echo "docker-engine: $*" >&2; exit 1; }

engine_answers() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@";
  else die "need root to run: $*"; fi
}

install_engine() {
  if command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1; then return; fi
  command -v apt-get >/dev/null 2>&1 || die "dockerd is not installed and apt-get is unavailable; install a Docker engine"
  echo "docker-engine: installing Debian's docker.io" >&2
  as_root apt-get update -q >/dev/null
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >/dev/null
}

start() {
  if engine_answers; then
    echo "docker-engine: an engine already answers; leaving it alone" >&2
    return 0
  fi
  install_engine
  mkdir -p "$STATE_DIR"
  if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    echo "docker-engine: dockerd (pid $(cat "$PIDFILE")) already started by us; waiting" >&2
  else
    local -a cmd=(dockerd --bridge=none --iptables=false --ip-masq=false)
    # shellcheck disable=SC2206
    cmd+=(${PAX_DOCKERD_ARGS:-})
    if [ "$(id -u)" -ne 0 ]; then cmd=(sudo "${cmd[@]}"); fi
    # exec in the background subshell so the recorded pid is dockerd's own (or sudo's,
    # which forwards signals).
    (exec setsid "${cmd[@]}" </dev/null >"$LOGFILE" 2>&1) &
    echo $! >"$PIDFILE"
  fi
  local i
  for ((i = 0; i < WAIT_S; i++)); do
    if engine_answers; then
      echo "docker-engine: started (pid $(cat "$PIDFILE"), log $LOGFILE)" >&2
      return 0
    fi
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      tail -n 20 "$LOGFILE" >&2 || true
      rm -f "$PIDFILE"
      die "dockerd exited during start-up; see $LOGFILE"
    fi
    sleep 1
  done
  die "dockerd did not answer 'docker info' within ${WAIT_S}s; see $LOGFILE"
}

stop() {
  if [ ! -f "$PIDFILE" ]; then
    echo "docker-engine: nothing started by this script; leaving any engine alone" >&2
    return 0
  fi
  local pid
  pid="$(cat "$PIDFILE")"
  if kill -0 "$pid" 2>/dev/null; then
    as_root kill -TERM "$pid"
    local i
    for ((i = 0; i < 30; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then as_root kill -KILL "$pid" || true; fi
  fi
  rm -f "$PIDFILE"
  echo "docker-engine: stopped dockerd (pid $pid)" >&2
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if engine_answers; then echo running; else echo stopped; exit 1; fi ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
