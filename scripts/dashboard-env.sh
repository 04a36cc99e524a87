#!/usr/bin/env bash
# Creates (once) the Node environment the Grafana dashboard check uses and prints its directory.
# Pinned: Grafana's published dashboard schema for Grafana 12.1 (@grafana/schema, TypeScript types
# generated from Grafana's CUE kinds: the dashboard at schemaVersion 41 and the options of each
# panel plugin), the Prometheus query type of the Grafana Foundation SDK for Grafana 11.6 (also
# schemaVersion 41; @grafana/schema has none), and the TypeScript compiler that checks the JSON
# against them. Needs node and npm; on Debian the script installs them when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
env_dir=target/dashboard-env
want='@grafana/schema@12.1.1 @grafana/grafana-foundation-sdk@11.6.0-cogv0.0.x.1769699379 typescript@5.9.3'
stamp="$env_dir/.installed"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d "$env_dir/node_modules/typescript" ]; then
  echo "$env_dir"
  exit 0
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -q >&2
    $sudo_cmd apt-get install -y -q nodejs npm >&2
  else
    echo "node and npm are required" >&2
    exit 1
  fi
fi
rm -rf "$env_dir"
mkdir -p "$env_dir"
echo '{"name": "trainyard-dashboard-env", "private": true}' > "$env_dir/package.json"
# No install scripts: the three packages are types and a compiler, and need none.
# shellcheck disable=SC2086
npm install --prefix "$env_dir" --save-exact --ignore-scripts --no-audit --no-fund --loglevel=error $want >&2
echo "$want" > "$stamp"
echo "$env_dir"
