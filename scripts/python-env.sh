#!/usr/bin/env bash
# Creates (once) the Python environment the manifest checks use and prints its python path.
# Pinned: the real Helm v4 SDK, offline Kubernetes schemas, and Kubeflow Trainer's published API
# models (which carry the upstream JobSet v1alpha2 schema). Needs python3 with venv; on Debian the
# script installs python3-venv when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/pyenv
want='helm-python-sdk==0.2.2 kubernetes-validate==1.37.0 kubeflow-trainer-api==2.3.0 jsonschema>=4.18 PyYAML>=6'
stamp="$venv/.installed"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$venv/bin/python"
  exit 0
fi
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get install -y -q python3-venv >&2
  else
    echo "python3 with the venv module is required" >&2
    exit 1
  fi
fi
rm -rf "$venv"
python3 -m venv "$venv" >&2
# shellcheck disable=SC2086
"$venv/bin/pip" install -q --disable-pip-version-check $want >&2
echo "$want" > "$stamp"
echo "$venv/bin/python"
