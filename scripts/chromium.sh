#!/usr/bin/env bash
# Prints the path of a headless-capable Chromium for the HTML report tests, installing Debian's
# `chromium` package (apt-get, through sudo when not root) when none is on PATH. $CHROMIUM, when
# set, wins.
set -euo pipefail
if [ -n "${CHROMIUM:-}" ]; then
  echo "$CHROMIUM"
  exit 0
fi
for name in chromium chromium-browser google-chrome; do
  if path=$(command -v "$name"); then
    echo "$path"
    exit 0
  fi
done
if ! command -v apt-get >/dev/null 2>&1; then
  echo "no Chromium on PATH and no apt-get: install Chromium or set CHROMIUM" >&2
  exit 1
fi
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >&2
command -v chromium
