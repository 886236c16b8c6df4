#!/usr/bin/env bash
# A real two-node Slurm on this machine for the cluster tests: one slurmctld and two slurmd
# (nodes n1 and n2, both on 127.0.0.1, one GPU each as far as Slurm knows), with their own
# munged, key, ports and state under one directory.
#
#   ci/slurm.sh start    # install Debian's slurm-wlm and munge if missing, start, wait until
#                        # both nodes are idle; prints the slurm.conf to export as SLURM_CONF
#   ci/slurm.sh stop     # cancel its jobs, stop the daemons it started (pidfiles), nothing else
#   ci/slurm.sh status
#
# Clients (sbatch, squeue, scontrol, scancel) find this cluster through SLURM_CONF; nothing is
# written under /etc except one line in /etc/hosts naming n1 and n2, removed again by stop.
set -euo pipefail

STATE_DIR="${PAX_SLURM_STATE_DIR:-/tmp/pax-slurm}"
CONF="$STATE_DIR/slurm.conf"
DAEMONS=(slurmd-n2 slurmd-n1 slurmctld munged)  # stop order
HOSTS_MARK="# pax ci/slurm.sh"
WAIT_S="${PAX_SLURM_WAIT_S:-60}"

NAME=slurm
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

install_slurm() {
  local missing=0 tool
  for tool in slurmctld slurmd munged sbatch scontrol; do
    command -v "$tool" >/dev/null 2>&1 || missing=1
  done
  [ "$missing" = 0 ] && return
  command -v apt-get >/dev/null 2>&1 || die "Slurm is not installed and apt-get is unavailable"
  echo "slurm: installing Debian's slurm-wlm and munge" >&2
  apt_install slurm-wlm munge
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Runs "$@" in the background in its own session, recording its pid as $STATE_DIR/$1.pid.
spawn() {
  local name=$1
  shift
  (exec setsid "$@" </dev/null >>"$STATE_DIR/$name.out" 2>&1) &
  echo $! >"$STATE_DIR/$name.pid"
}

running() { [ -f "$STATE_DIR/$1.pid" ] && kill -0 "$(cat "$STATE_DIR/$1.pid")" 2>/dev/null; }

write_conf() {
  # Fresh ports each start: other clusters (or another of these) may hold the usual ones.
  local ctld n1 n2
  ctld="$(free_port)" n1="$(free_port)" n2="$(free_port)"
  cat >"$CONF" <<EOF
ClusterName=paxci
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE_DIR/munge.socket
StateSaveLocation=$STATE_DIR/slurmctld-state
SlurmdSpoolDir=$STATE_DIR/spool-%n
SlurmctldPidFile=$STATE_DIR/slurmctld.pidfile
SlurmdPidFile=$STATE_DIR/slurmd-%n.pidfile
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
# Nodes as declared here, whatever this machine has (two nodes share its cores).
SlurmdParameters=config_overrides
# Finished jobs stay visible to scontrol (their exit code) for an hour.
MinJobAge=3600
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
GresTypes=gpu
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$n1 CPUs=2 Gres=gpu:1 State=UNKNOWN
NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$n2 CPUs=2 Gres=gpu:1 State=UNKNOWN
PartitionName=ci Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
EOF
  # One GPU per node as Slurm counts them: enough for --gpus-per-node=1; nothing uses it.
  echo "Name=gpu Count=1 File=/dev/null" >"$STATE_DIR/gres.conf"
}

start() {
  if running slurmctld; then
    echo "slurm: already started by this script ($STATE_DIR)" >&2
    echo "$CONF"
    return 0
  fi
  install_slurm
  mkdir -p "$STATE_DIR/slurmctld-state"
  chmod 700 "$STATE_DIR"
  if ! getent hosts n1 >/dev/null || ! getent hosts n2 >/dev/null; then
    echo "127.0.0.1 n1 n2  $HOSTS_MARK" | as_root tee -a /etc/hosts >/dev/null
    touch "$STATE_DIR/hosts-added"
  fi
  if [ ! -f "$STATE_DIR/munge.key" ]; then
    head -c 1024 /dev/urandom >"$STATE_DIR/munge.key"
    chmod 400 "$STATE_DIR/munge.key"
  fi
  write_conf
  # munged refuses root without --force; this one serves only this cluster's socket.
  spawn munged munged --foreground --force --socket="$STATE_DIR/munge.socket" \
    --key-file="$STATE_DIR/munge.key" --pid-file="$STATE_DIR/munged.pidfile" \
    --log-file="$STATE_DIR/munged.log" --seed-file="$STATE_DIR/munged.seed"
  local i
  for ((i = 0; i < WAIT_S * 10; i++)); do [ -S "$STATE_DIR/munge.socket" ] && break; sleep 0.1; done
  spawn slurmctld slurmctld -D -f "$CONF" -L "$STATE_DIR/slurmctld.log"
  spawn slurmd-n1 slurmd -D -N n1 -f "$CONF" -L "$STATE_DIR/slurmd-n1.log"
  spawn slurmd-n2 slurmd -D -N n2 -f "$CONF" -L "$STATE_DIR/slurmd-n2.log"
  local states=""
  for ((i = 0; i < WAIT_S; i++)); do
    states="$(SLURM_CONF="$CONF" sinfo -h -N -o '%N=%T' 2>/dev/null | sort -u | tr '\n' ' ')"
    if [ "$states" = "n1=idle n2=idle " ]; then
      echo "slurm: started n1 and n2 ($STATE_DIR)" >&2
      echo "$CONF"
      return 0
    fi
    local d
    for d in munged slurmctld slurmd-n1 slurmd-n2; do
      running "$d" || { tail -n 20 "$STATE_DIR/$d".{out,log} >&2 2>/dev/null || true; stop;
                        die "$d exited during start-up; see $STATE_DIR"; }
    done
    sleep 1
  done
  stop
  die "nodes not idle within ${WAIT_S}s (${states:-no answer}); see $STATE_DIR"
}

stop() {
  if running slurmctld; then
    # Jobs first, so that no step outlives the daemons that track it.
    SLURM_CONF="$CONF" scancel --quiet --partition=ci 2>/dev/null || true
    local i
    for ((i = 0; i < 30; i++)); do
      [ -z "$(SLURM_CONF="$CONF" squeue -h -o %i 2>/dev/null)" ] && break
      sleep 1
    done
  fi
  local d pid i
  for d in "${DAEMONS[@]}"; do
    [ -f "$STATE_DIR/$d.pid" ] || continue
    pid="$(cat "$STATE_DIR/$d.pid")"
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid"
      for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
    rm -f "$STATE_DIR/$d.pid"
  done
  if [ -f "$STATE_DIR/hosts-added" ]; then
    as_root sed -i "\|$HOSTS_MARK\$|d" /etc/hosts
    rm -f "$STATE_DIR/hosts-added"
  fi
  echo "slurm: stopped what ci/slurm.sh started ($STATE_DIR)" >&2
}

status() {
  running slurmctld || { echo stopped; return 1; }
  SLURM_CONF="$CONF" sinfo -N
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
