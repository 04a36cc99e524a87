#!/usr/bin/env bash
# Stops the cluster that scripts/slurm/start.sh runs in STATE_DIR: cancels every job and waits for
# the jobs to clear (their processes outlive slurmd otherwise), then stops only the daemons whose
# pids STATE_DIR/run records (SIGTERM, then SIGKILL). --purge also deletes STATE_DIR. Exits 0 when
# nothing of the cluster runs any more (also when STATE_DIR does not exist).
# Usage: scripts/slurm/stop.sh STATE_DIR [--purge]
set -uo pipefail

usage() { echo "usage: $0 STATE_DIR [--purge]" >&2; exit 2; }
if [ $# -lt 1 ] || [ $# -gt 2 ]; then usage; fi
purge=false
if [ $# -eq 2 ]; then
  if [ "$2" = --purge ]; then purge=true; else usage; fi
fi
[ -d "$1" ] || exit 0
D=$(cd "$1" && pwd)
term_wait=${TRAINYARD_SLURM_STOP_TIMEOUT:-10}
job_wait=${TRAINYARD_SLURM_JOB_TIMEOUT:-20}

say() { echo "slurm/stop: $*" >&2; }
t0=$EPOCHREALTIME

# pid_of NAME COMM: the pid recorded in run/NAME.pid, if that process still runs the expected program
# (a recycled pid is someone else's).
pid_of() {
  local pid
  pid=$(cat "$D/run/$1.pid" 2> /dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [ "$(cat "/proc/$pid/comm" 2> /dev/null)" = "$2" ] || return 1
  echo "$pid"
}
# A zombie has stopped; only its parent (or a slow init) has yet to reap it.
running() {
  local state
  state=$(sed 's/^.*) //' "/proc/$1/stat" 2> /dev/null | cut -d' ' -f1)
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

unset SLURM_JWT
export SLURM_CONF=$D/etc/slurm.conf
if ctld=$(pid_of slurmctld slurmctld) && running "$ctld"; then
  mapfile -t ids < <(squeue -h -o '%A' 2> /dev/null)
  if [ ${#ids[@]} -gt 0 ]; then
    say "cancelling ${#ids[@]} job(s)"
    scancel "${ids[@]}" 2> /dev/null
    deadline=$((SECONDS + job_wait))
    while [ $SECONDS -lt $deadline ] && [ -n "$(squeue -h -o '%A' 2> /dev/null)" ]; do sleep 0.2; done
    left=$(squeue -h -o '%A %T' 2> /dev/null | paste -sd, -)
    [ -z "$left" ] || say "jobs still listed after ${job_wait}s: $left"
  fi
fi

# stop_group COMM NAME...: SIGTERM to all of them, wait, SIGKILL what is left.
stopped_all=true
stop_group() {
  local comm=$1 name pid pids=() deadline
  shift
  for name in "$@"; do
    if pid=$(pid_of "$name" "$comm") && running "$pid"; then
      kill -TERM "$pid" 2> /dev/null && pids+=("$pid")
    fi
  done
  deadline=$((SECONDS + term_wait))
  for pid in "${pids[@]}"; do
    while running "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    if running "$pid"; then
      say "$comm $pid ignored SIGTERM for ${term_wait}s: SIGKILL"
      kill -KILL "$pid" 2> /dev/null
      sleep 0.2
      running "$pid" && { say "$comm $pid survived SIGKILL"; stopped_all=false; }
    fi
  done
  for name in "$@"; do rm -f "$D/run/$name.pid"; done
}

slurmds=()
for f in "$D"/run/slurmd-*.pid; do
  [ -e "$f" ] || continue
  f=${f##*/}
  slurmds+=("${f%.pid}")
done
stop_group slurmrestd slurmrestd
[ ${#slurmds[@]} -eq 0 ] || stop_group slurmd "${slurmds[@]}"
stop_group slurmctld slurmctld
stop_group munged munged
$stopped_all || exit 1
say "stopped in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }')"

if $purge; then
  # Delete only what start.sh made, never a directory passed by mistake.
  [ -e "$D/.trainyard-slurm" ] || { say "not purging $D: it has no .trainyard-slurm marker"; exit 1; }
  rm -rf "$D"
fi
exit 0
