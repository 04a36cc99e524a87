#!/usr/bin/env bash
# Runs CMD against a fresh local Slurm cluster: starts one (scripts/slurm/start.sh) in a new short
# temporary directory, exports its client environment, runs CMD, then always stops the cluster and
# deletes the directory, on success, failure or a signal. Exits with CMD's status; 1 when the
# cluster did not start or could not be stopped. On SIGHUP/SIGINT/SIGTERM, CMD gets SIGTERM, and a
# CMD that still exits 0 yields 128+N.
# Usage: scripts/slurm/with-slurm.sh CMD [ARGS...]
set -uo pipefail

[ $# -ge 1 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
# Short on purpose: the munge socket inside must fit a unix socket path (108 bytes).
dir=$(mktemp -d "${TMPDIR:-/tmp}/tys.XXXXXX") || exit 1

# shellcheck disable=SC2317  # called from the EXIT trap
cleanup() {
  local rc=$?
  trap - EXIT
  # A cluster left running must not pass unnoticed, even after CMD succeeded.
  if ! "$here/stop.sh" "$dir" --purge; then [ "$rc" -ne 0 ] || rc=1; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

exports=$("$here/start.sh" "$dir") || { echo "with-slurm: the cluster did not start" >&2; exit 1; }
eval "$exports"
# A token in SLURM_JWT would switch srun to auth/jwt, which breaks job launch (see README.md).
unset SLURM_JWT

# CMD runs in the background so that a signal sent to this script alone (say, by `timeout`) is
# handled now, not after CMD ends: it is passed on to CMD as SIGTERM (a background command ignores
# SIGINT), and the cluster is stopped once CMD has gone.
"$@" <&0 &
child=$!
signal=0
# shellcheck disable=SC2317  # called from the traps below
on_signal() {
  signal=$1
  kill -TERM "$child" 2> /dev/null
}
trap 'on_signal 1' HUP
trap 'on_signal 2' INT
trap 'on_signal 15' TERM
wait "$child"
rc=$?
# A wait cut short by a signal returns early; keep waiting for CMD itself.
while [ "$signal" -ne 0 ] && kill -0 "$child" 2> /dev/null; do
  wait "$child"
  rc=$?
done
# CMD may exit 0 on SIGTERM; the run was still cut short.
if [ "$signal" -ne 0 ] && [ "$rc" -eq 0 ]; then rc=$((128 + signal)); fi
exit "$rc"
