#!/bin/bash
# Runs in the flux-installer init container of every node pod of TrainJob @JOB@: copies Flux from
# the view image into the volume the node container shares, and writes the broker's configuration.
set -euo pipefail
root=/mnt/flux
config="$root/config"
mkdir -p "$config/etc/flux/system/cron.d" "$config/etc/flux/config" "$config/etc/curve" \
  "$config/var/lib/flux" "$config/run/flux"
printf '%s\n' '@HOSTS@' > "$config/etc/flux/system/hostlist"
cat > "$config/etc/flux/config/broker.toml" <<'TOML'
[access]
allow-guest-user = true
allow-root-owner = true

[resource]
path = "/mnt/flux/config/etc/flux/system/R"

[bootstrap]
curve_cert = "/mnt/flux/config/etc/curve/curve.cert"
default_port = 8050
default_bind = "tcp://@DEVICE@:%p"
default_connect = "tcp://%h.@SUBDOMAIN@.@NAMESPACE@.svc.cluster.local:%p"
hosts = [{ host = "@HOSTS@" }]

[archive]
dbpath = "/mnt/flux/config/var/lib/flux/job-archive.sqlite"
period = "1m"
busytimeout = "50s"

[sched-fluxion-qmanager]
queue-policy = "@QUEUE_POLICY@"
TOML
# The view image keeps its Flux under one hashed directory of /opt/views/._view.
view=$(find /opt/views/._view -mindepth 1 -maxdepth 1 -type d | sort | head -n 1)
if [ -z "$view" ]; then
  echo "no Flux view under /opt/views/._view in this image" >&2
  exit 1
fi
mkdir -p "$root/view"
cp -a "$view/." "$root/view/"
if [ -d /opt/software ]; then cp -a /opt/software "$root/"; fi
touch "$root/flux-operator-done.txt"
