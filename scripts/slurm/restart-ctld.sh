#!/usr/bin/env bash
# Gracefully restarts the slurmctld of the cluster that scripts/slurm/start.sh runs in STATE_DIR
# (for fault tests): SIGTERM, wait until it has saved its state and exited, start it again, and wait
# until `scontrol ping` answers. Running jobs keep running; slurmstepd does not need slurmctld.
# Usage: scripts/slurm/restart-ctld.sh STATE_DIR
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 STATE_DIR" >&2; exit 2; }
[ -d "$1" ] || { echo "slurm/restart-ctld: no such directory: $1" >&2; exit 1; }
D=$(cd "$1" && pwd)
timeout_s=${TRAINYARD_SLURM_START_TIMEOUT:-60}

say() { echo "slurm/restart-ctld: $*" >&2; }
die() { say "$*"; exit 1; }
t0=$EPOCHREALTIME

# is_ctld PID: PID is a live slurmctld (a zombie has exited; a recycled pid is someone else's).
is_ctld() {
  local state
  [ "$(cat "/proc/$1/comm" 2> /dev/null)" = slurmctld ] || return 1
  state=$(sed 's/^.*) //' "/proc/$1/stat" 2> /dev/null | cut -d' ' -f1)
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}
running_ctld() {   # the pid from the pid file, if that is a live slurmctld
  local pid
  pid=$(cat "$D/run/slurmctld.pid" 2> /dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && is_ctld "$pid" && echo "$pid"
}

# SLURM_JWT in slurmctld's environment switches it to auth/jwt, and it then refuses its own state.
unset SLURM_JWT
export SLURM_CONF=$D/etc/slurm.conf
[ -f "$SLURM_CONF" ] || die "$SLURM_CONF is missing: was the cluster started with start.sh?"
old=$(running_ctld) || die "slurmctld is not running in $D"

kill -TERM "$old"
deadline=$((SECONDS + timeout_s))
while is_ctld "$old"; do
  [ $SECONDS -lt $deadline ] || die "slurmctld $old still runs ${timeout_s}s after SIGTERM"
  sleep 0.05
done
say "slurmctld $old stopped after $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2fs", b - a }')"

slurmctld -f "$SLURM_CONF" < /dev/null >> "$D/log/start.out" 2>&1 || true
deadline=$((SECONDS + timeout_s))
while ! scontrol ping 2> /dev/null | grep -q 'is UP'; do
  if [ $SECONDS -ge $deadline ]; then
    tail -n 5 "$D/log/slurmctld.log" >&2 || true
    die "slurmctld does not answer scontrol ping after ${timeout_s}s"
  fi
  sleep 0.05
done
say "slurmctld $(running_ctld || echo '?') answers again after $(awk -v a="$t0" -v b="$EPOCHREALTIME" \
  'BEGIN { printf "%.2fs", b - a }')"
