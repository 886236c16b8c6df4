#!/usr/bin/env bash
# Start or stop a throwaway image registry on 127.0.0.1 (Debian's docker-registry), with TLS and
# basic authentication as a real one has.
#
#   ci/registry.sh start [PORT]   # default PORT 5000; prints 127.0.0.1:PORT on stdout
#   ci/registry.sh stop           # stops only the registry this script started
#
# start makes, in the state directory: a throwaway CA and a server certificate for 127.0.0.1
# (openssl), an htpasswd file with one bcrypt entry (apache2-utils' htpasswd) for user
# PAX_REGISTRY_USER (default pax) and a random password (kept in STATE/credentials, USER:PASSWORD).
# It copies the CA to /etc/docker/certs.d/HOST:PORT/ca.crt, where the Docker engine and
# publish look for it, and runs `docker login`, which stores the credentials in the Docker
# config ($DOCKER_CONFIG/config.json, else ~/.docker/config.json). stop undoes all three.
#
# PAX_REGISTRY_READONLY=1 refuses pushes (error-path tests); PAX_REGISTRY_PLAIN=1 serves plain
# HTTP without authentication; PAX_REGISTRY_STATE_DIR runs a second instance beside the first,
# and PAX_REGISTRY_DATA_DIR lets it serve another instance's storage (left in place by stop).
set -euo pipefail

STATE_DIR="${PAX_REGISTRY_STATE_DIR:-/tmp/pax-registry}"
PIDFILE="$STATE_DIR/registry.pid"
WAIT_S="${PAX_REGISTRY_WAIT_S:-30}"
USER_NAME="${PAX_REGISTRY_USER:-pax}"
CERTS_D="/etc/docker/certs.d"

NAME=registry
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# 0 when a registry answers /v2/ on the port (401 counts: it answers, wants credentials).
answers() { python3 - "$1" "$2" <<'PY'
import ssl, sys, urllib.error, urllib.request
port, ca = sys.argv[1], sys.argv[2]
scheme = "https" if ca else "http"
ctx = ssl.create_default_context(cafile=ca) if ca else None
try:
    with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/v2/", timeout=2, context=ctx) as r:
        sys.exit(0 if r.status == 200 else 1)
except urllib.error.HTTPError as e:
    sys.exit(0 if e.code == 401 else 1)
except Exception:
    sys.exit(1)
PY
}

port_taken() { python3 -c 'import socket, sys; s = socket.socket(); sys.exit(0 if s.connect_ex(("127.0.0.1", int(sys.argv[1]))) == 0 else 1)' "$1"; }

need() {  # installs the apt package that provides a missing command
  command -v "$1" >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 || die "$1 is missing and apt-get is unavailable; install $2"
  echo "registry: installing Debian's $2" >&2
  apt_install "$2"
}

make_tls() {  # a CA valid for two days, and a server certificate for 127.0.0.1 signed by it
  local d="$STATE_DIR"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=pax throwaway registry CA" \
    -keyout "$d/ca.key" -out "$d/ca.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null
  printf '%s\n' "subjectAltName=IP:127.0.0.1" "basicConstraints=CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" \
    "authorityKeyIdentifier=keyid" >"$d/server.ext"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 2 -extfile "$d/server.ext" -out "$d/server.crt" 2>/dev/null
  rm -f "$d/server.csr" "$d/server.ext" "$d/ca.srl"
  chmod 600 "$d/ca.key" "$d/server.key"
}

start() {
  local port="${1:-${PAX_REGISTRY_PORT:-5000}}"
  case "$port" in (*[!0-9]*|'') die "port must be a number, got '$port'";; esac
  local plain="${PAX_REGISTRY_PLAIN:-0}"
  mkdir -p "$STATE_DIR"
  if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    local old ca=""; old="$(cat "$STATE_DIR/port")"
    [ -f "$STATE_DIR/ca.crt" ] && ca="$STATE_DIR/ca.crt"
    answers "$old" "$ca" || die "registry pid $(cat "$PIDFILE") started earlier does not answer on 127.0.0.1:$old"
    echo "127.0.0.1:$old"; return 0
  fi
  if port_taken "$port"; then die "something else already listens on 127.0.0.1:$port; pick another port"; fi
  need docker-registry docker-registry
  local data="${PAX_REGISTRY_DATA_DIR:-$STATE_DIR/data}"
  if [ -z "${PAX_REGISTRY_DATA_DIR:-}" ]; then rm -rf "$data"; fi
  mkdir -p "$data"
  rm -f "$STATE_DIR/ca.crt" "$STATE_DIR/credentials" "$STATE_DIR/certs-d" "$STATE_DIR/login-config"
  local ca="" tls_yml="" auth_yml=""
  if [ "$plain" != 1 ]; then
    need openssl openssl
    need htpasswd apache2-utils
    make_tls
    ca="$STATE_DIR/ca.crt"
    local password; password="$(openssl rand -hex 16)"
    (umask 077; printf '%s:%s\n' "$USER_NAME" "$password" >"$STATE_DIR/credentials")
    htpasswd -Bbn "$USER_NAME" "$password" >"$STATE_DIR/htpasswd"
    tls_yml="$(printf '  tls:\n    certificate: %s\n    key: %s' "$STATE_DIR/server.crt" "$STATE_DIR/server.key")"
    auth_yml="$(printf 'auth:\n  htpasswd:\n    realm: pax-registry\n    path: %s' "$STATE_DIR/htpasswd")"
  fi
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
$auth_yml
http:
  addr: 127.0.0.1:$port
$tls_yml
YML
  (exec setsid docker-registry serve "$STATE_DIR/config.yml" </dev/null >"$STATE_DIR/registry.log" 2>&1) &
  echo $! >"$PIDFILE"
  echo "$port" >"$STATE_DIR/port"
  # A start that fails from here on stops what it started (registry, CA copy, login).
  trap '[ "${started:-0}" = 1 ] || stop' EXIT
  local i up=0
  for ((i = 0; i < WAIT_S * 4; i++)); do
    if answers "$port" "$ca"; then up=1; break; fi
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      tail -n 20 "$STATE_DIR/registry.log" >&2 || true; rm -f "$PIDFILE"
      die "docker-registry exited during start-up"
    fi
    sleep 0.25
  done
  [ "$up" = 1 ] || die "docker-registry did not answer on 127.0.0.1:$port within ${WAIT_S}s"
  local address="127.0.0.1:$port"
  echo "registry: serving on $address (pid $(cat "$PIDFILE"))" >&2
  if [ "$plain" != 1 ]; then
    as_root mkdir -p "$CERTS_D/$address"
    as_root cp "$ca" "$CERTS_D/$address/ca.crt"
    echo "$CERTS_D/$address" >"$STATE_DIR/certs-d"
    local config="${DOCKER_CONFIG:-$HOME/.docker}"
    echo "registry: TLS, CA bundle $ca (copied to $CERTS_D/$address/ca.crt)" >&2
    echo "registry: basic auth, user $USER_NAME, USER:PASSWORD in $STATE_DIR/credentials" >&2
    if docker info >/dev/null 2>&1; then
      local out
      out="$(cut -d: -f2- "$STATE_DIR/credentials" \
        | DOCKER_CONFIG="$config" docker login -u "$USER_NAME" --password-stdin "$address" 2>&1)" \
        || die "docker login $address failed: $(echo "$out" | tail -n 1)"
      echo "$config" >"$STATE_DIR/login-config"
      echo "registry: logged in; credentials stored in $config/config.json" >&2
    else
      echo "registry: no Docker engine answers, so not logged in: docker login $address" >&2
    fi
  else
    echo "registry: plain HTTP, no authentication" >&2
  fi
  started=1
  echo "$address"
}

stop() {
  if [ ! -f "$PIDFILE" ]; then echo "registry: nothing started by this script" >&2; return 0; fi
  local pid port; pid="$(cat "$PIDFILE")"; port="$(cat "$STATE_DIR/port" 2>/dev/null || true)"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    local i; for ((i = 0; i < 20; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" || true
  fi
  if [ -f "$STATE_DIR/login-config" ] && [ -n "$port" ]; then
    DOCKER_CONFIG="$(cat "$STATE_DIR/login-config")" docker logout "127.0.0.1:$port" >/dev/null 2>&1 || true
  fi
  if [ -f "$STATE_DIR/certs-d" ]; then as_root rm -rf "$(cat "$STATE_DIR/certs-d")"; fi
  rm -rf "$PIDFILE" "$STATE_DIR/data" "$STATE_DIR/port" "$STATE_DIR/certs-d" "$STATE_DIR/login-config" \
    "$STATE_DIR/credentials" "$STATE_DIR/htpasswd" "$STATE_DIR"/*.key
  echo "registry: stopped (pid $pid)" >&2
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) stop ;;
  *) echo "usage: $0 start [PORT]|stop" >&2; exit 2 ;;
esac
