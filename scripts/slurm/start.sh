#!/usr/bin/env bash
# Starts a throwaway Slurm 22.05 cluster on 127.0.0.1 for trainyard's tests and prints its client
# environment as `export` lines on stdout (progress goes to stderr). One munged, one slurmctld, one
# slurmd per fake node (n1..nN, each with fake GPUs) and slurmrestd with JWT auth, all without
# systemd, all state, logs and pid files under STATE_DIR. Installs the Debian packages first when
# they are missing. Running it again on a running cluster starts nothing new and mints a new token.
# Usage: eval "$(scripts/slurm/start.sh STATE_DIR)"      (see scripts/slurm/README.md for the knobs)
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 STATE_DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)

nodes=${TRAINYARD_SLURM_NODES:-4}
cpus=${TRAINYARD_SLURM_CPUS:-4}
mem_mb=${TRAINYARD_SLURM_MEM_MB:-4000}
gpus=${TRAINYARD_SLURM_GPUS:-2}
ctld_port=${TRAINYARD_SLURM_CTLD_PORT:-6817}
node_port=${TRAINYARD_SLURM_NODE_PORT:-17001}
rest_port=${TRAINYARD_SLURM_REST_PORT:-6820}
start_timeout=${TRAINYARD_SLURM_START_TIMEOUT:-60}
token_lifespan=${TRAINYARD_SLURM_TOKEN_LIFESPAN:-86400}
api=v0.0.38

say() { echo "slurm/start: $*" >&2; }
die() { say "$*"; exit 1; }

for v in NODES CPUS MEM_MB GPUS CTLD_PORT NODE_PORT REST_PORT START_TIMEOUT TOKEN_LIFESPAN; do
  var=TRAINYARD_SLURM_$v
  [[ ${!var:-0} =~ ^[0-9]+$ ]] || die "$var must be a whole number, got '${!var}'"
done
# The topology splits the nodes into two leaf switches; the batch partition is the second one.
[ "$nodes" -ge 2 ] || die "TRAINYARD_SLURM_NODES must be at least 2, got $nodes"
[ "$cpus" -ge 1 ] || die "TRAINYARD_SLURM_CPUS must be at least 1"

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
user=$(id -un)

t0=$EPOCHREALTIME
elapsed() { awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'; }

# --- packages -------------------------------------------------------------------------------------
# auth_jwt.so, which slurmrestd's JWT auth needs, ships only in slurm-wlm-jwt-plugin.
want=(munge slurmctld slurmd slurmrestd slurm-client slurm-wlm-jwt-plugin)
missing=()
for p in "${want[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get: install Slurm 22.05 by hand"
  say "installing ${missing[*]}"
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  say "packages installed after $(elapsed)"
fi

# --- layout ---------------------------------------------------------------------------------------
D=$(realpath -m -- "$1")
sock=$D/run/munge.socket
# A unix socket path must fit in sun_path (108 bytes, including the terminating NUL).
[ ${#sock} -le 107 ] || die "STATE_DIR path too long: $sock is ${#sock} bytes, the limit is 107"
mkdir -p "$D"/{etc,run,log,state,dev,jobs} || die "cannot create $D"
for ((i = 1; i <= nodes; i++)); do mkdir -p "$D/spool/n$i"; done
# munged refuses a socket directory that others cannot traverse.
chmod 755 "$D" "$D/run"
: > "$D/log/start.out"
: > "$D/.trainyard-slurm"   # lets stop.sh --purge check that it deletes a cluster's directory

# A daemon is alive when its pid file names a live process of the expected program. A zombie (the
# sandbox's init reaps late) or a recycled pid counts as dead.
alive() {
  local pid state
  pid=$(cat "$D/run/$1.pid" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] || return 1
  state=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}
any_alive() {
  local i
  if alive munged munged || alive slurmctld slurmctld || alive slurmrestd slurmrestd; then return 0; fi
  for ((i = 1; i <= nodes; i++)); do alive "slurmd-n$i" slurmd && return 0; done
  return 1
}

umask 077
[ -s "$D/etc/munge.key" ] || dd if=/dev/urandom of="$D/etc/munge.key" bs=1024 count=1 status=none
[ -s "$D/etc/jwt.key" ] || dd if=/dev/urandom of="$D/etc/jwt.key" bs=32 count=1 status=none
umask 022
# gres/gpu drops GPUs without a File=, and slurmd complains about a File= that is not a device, so
# each fake GPU is a character device (the same numbers as /dev/null). Without mknod rights a
# plain file still works, with a complaint in the slurmd log.
for ((g = 0; g < gpus; g++)); do
  [ -e "$D/dev/gpu$g" ] || mknod "$D/dev/gpu$g" c 1 3 2>/dev/null || touch "$D/dev/gpu$g"
done

# --- configuration --------------------------------------------------------------------------------
half=$((nodes / 2))
all="n[1-$nodes]"
left="n[1-$half]"
right="n[$((half + 1))-$nodes]"
gres_node=""
[ "$gpus" -eq 0 ] || gres_node="Gres=gpu:$gpus"
if [ "$(id -u)" -eq 0 ]; then slurm_user=root; else slurm_user=$user; fi

new=$(mktemp -d "$D/etc/.new.XXXXXX")
trap 'rm -rf "$new"' EXIT
cat > "$new/slurm.conf" <<EOF
# Written by trainyard scripts/slurm/start.sh; rewritten on every start.
ClusterName=trainyard
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=$slurm_user
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$D/etc/jwt.key
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
SchedulerType=sched/backfill
TopologyPlugin=topology/tree
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmdTimeout=30
MinJobAge=300
KillWait=5
NodeName=$all NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$node_port-$((node_port + nodes - 1))] CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=$mem_mb $gres_node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=batch Nodes=$right MaxTime=INFINITE State=UP
EOF
cat > "$new/topology.conf" <<EOF
SwitchName=s1 Nodes=$left
SwitchName=s2 Nodes=$right
SwitchName=top Switches=s[1-2]
EOF
if [ "$gpus" -gt 0 ]; then
  echo "NodeName=$all Name=gpu File=$D/dev/gpu[0-$((gpus - 1))]" > "$new/gres.conf"
else
  : > "$new/gres.conf"
fi
# Daemons already running keep the configuration they read; changing it under them would leave a
# cluster that no longer matches its files.
for f in slurm.conf topology.conf gres.conf; do
  if ! cmp -s "$new/$f" "$D/etc/$f"; then
    if [ -e "$D/etc/$f" ] && any_alive; then
      die "the cluster in $D runs with another $f (other sizes or ports?): stop it first"
    fi
    mv "$new/$f" "$D/etc/$f"
  fi
done
rm -rf "$new"
trap - EXIT

# --- daemons --------------------------------------------------------------------------------------
# SLURM_JWT in a daemon's environment switches it to auth/jwt (slurmctld then refuses its state).
unset SLURM_JWT
export SLURM_CONF=$D/etc/slurm.conf
started=()
run_bg() { "$@" < /dev/null >> "$D/log/start.out" 2>&1; }   # the daemons fork; keep stdout free

if ! alive munged munged; then
  run_bg munged --key-file="$D/etc/munge.key" --socket="$sock" --pid-file="$D/run/munged.pid" \
    --log-file="$D/log/munged.log" --seed-file="$D/state/munged.seed" || die "munged failed: see $D/log"
  started+=(munged)
fi
if ! alive slurmctld slurmctld; then
  run_bg slurmctld -f "$SLURM_CONF" || true   # a failure shows up below, with its log
  started+=(slurmctld)
fi
for ((i = 1; i <= nodes; i++)); do
  if ! alive "slurmd-n$i" slurmd; then
    run_bg slurmd -f "$SLURM_CONF" -N "n$i" || true
    started+=("slurmd-n$i")
  fi
done
if ! alive slurmrestd slurmrestd; then
  # slurmrestd refuses to run as root, so root hands it to nobody after binding. SLURM_JWT=daemon
  # makes it authenticate to slurmctld with the caller's token instead of munge.
  rest_user=()
  [ "$(id -u)" -ne 0 ] || rest_user=(-u nobody)
  SLURM_JWT=daemon nohup slurmrestd "${rest_user[@]}" -a rest_auth/jwt \
    -s "openapi/v0.0.36,openapi/v0.0.37,openapi/$api" "127.0.0.1:$rest_port" \
    < /dev/null > "$D/log/slurmrestd.log" 2>&1 &
  echo $! > "$D/run/slurmrestd.pid"
  started+=(slurmrestd)
fi
if [ ${#started[@]} -eq 0 ]; then say "already running in $D"; else say "started ${started[*]}"; fi

# --- wait until usable ----------------------------------------------------------------------------
# fail MESSAGE: show the logs of the daemons that are not running (slurmctld's when all run, as on
# a timeout), stop what runs, exit 1.
fail() {
  local name shown=false
  say "$1"
  for name in munged slurmctld $(seq -f 'slurmd-n%g' "$nodes") slurmrestd; do
    alive "$name" "${name%%-*}" && continue
    log_tail "$name"
    shown=true
  done
  $shown || log_tail slurmctld
  log_tail start.out   # what the daemons printed before they had opened their logs
  say "stopping what runs in $D"
  "$here/stop.sh" "$D" >&2 || true
  exit 1
}
log_tail() {
  local f=$D/log/$1
  [[ $f == *.out ]] || f=$f.log
  [ -s "$f" ] || return 0
  echo "--- tail of $f" >&2
  grep -v pmix "$f" | tail -n 5 >&2   # every daemon logs that PMIx is missing: noise
}
# The daemons daemonize, so a pid file appears a moment after the launch; past a short grace a
# missing or dead daemon (say, its port already taken) fails the start at once, not at the timeout.
check_daemons() {
  local name
  for name in slurmctld "${started[@]}"; do
    alive "$name" "${name%%-*}" || fail "$name is not running (port taken? bad config?)"
  done
}
# REST status code of GET ping, over bash's /dev/tcp so that no HTTP client is needed.
rest_status() {
  (
    exec 3<> "/dev/tcp/127.0.0.1/$rest_port" || exit 1
    printf 'GET /slurm/%s/ping HTTP/1.1\r\nHost: 127.0.0.1\r\nX-SLURM-USER-NAME: %s\r\nX-SLURM-USER-TOKEN: %s\r\nConnection: close\r\n\r\n' \
      "$api" "$user" "$token" >&3
    IFS=' ' read -r -t 5 _ code _ <&3 || exit 1
    echo "${code%$'\r'}"
  ) 2> /dev/null
}

deadline=$((SECONDS + start_timeout))
grace=$((SECONDS + 3))
ok=""
states=""
while [ $SECONDS -lt $deadline ]; do
  past_grace=false
  [ $SECONDS -lt $grace ] || { past_grace=true; check_daemons; }
  states=$(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u || true)
  up=$(grep -cE ' (idle|mix|alloc|comp)$' <<< "$states" || true)
  if [ "$up" -ge "$nodes" ]; then ok=1; break; fi
  # Nodes recovered from an old state directory can come back drained or down; their slurmd runs
  # again, so put them back in service.
  stuck=$(awk '$2 ~ /^(drain|drng|down)$/ { print $1 }' <<< "$states" | paste -sd, -)
  if [ -n "$stuck" ] && $past_grace; then scontrol update nodename="$stuck" state=resume 2> /dev/null || true; fi
  sleep 0.2
done
[ -n "$ok" ] || fail "nodes not all up after ${start_timeout}s: $(tr '\n' ' ' <<< "$states")"

token=$(scontrol token username="$user" lifespan="$token_lifespan" 2>> "$D/log/start.out") ||
  fail "scontrol token failed (is slurm-wlm-jwt-plugin installed?)"
token=${token#SLURM_JWT=}
code=""
while [ $SECONDS -lt $deadline ]; do
  alive slurmrestd slurmrestd || fail "slurmrestd is not running (port $rest_port taken?)"
  code=$(rest_status || true)
  [ "$code" = 200 ] && break
  sleep 0.2
done
[ "$code" = 200 ] || fail "slurmrestd does not answer ping on 127.0.0.1:$rest_port (HTTP '${code}')"
say "ready in $(elapsed): $nodes nodes up, REST on 127.0.0.1:$rest_port"

# --- client environment ---------------------------------------------------------------------------
# The token is not exported as SLURM_JWT: in a client's environment it breaks srun (also inside
# batch jobs, which inherit sbatch's environment).
umask 077
{
  printf 'export SLURM_CONF=%q\n' "$SLURM_CONF"
  printf 'export SLURMRESTD_URL=%q\n' "http://127.0.0.1:$rest_port"
  printf 'export SLURMRESTD_API=%q\n' "$api"
  printf 'export SLURMRESTD_USER=%q\n' "$user"
  printf 'export SLURMRESTD_TOKEN=%q\n' "$token"
  printf 'export TRAINYARD_SLURM_STATE=%q\n' "$D"
} > "$D/env.sh"
cat "$D/env.sh"
