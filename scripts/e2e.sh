#!/usr/bin/env bash
# trainyard's end-to-end suite on a real Kubernetes control plane (e2e/): kube-apiserver with
# etcd, kube-controller-manager and kube-scheduler from a folder of binaries, the upstream CRDs
# of Kubeflow Trainer, JobSet and LeaderWorkerSet, stand-ins for nodes, the kubelet's deletions
# and the JobSet and LeaderWorkerSet controllers, the chart installed with the real Helm SDK, and
# the release trainyard binary through every scenario. Prints PASS or FAIL per scenario and a
# summary; exits 0 only when every scenario passed.
#
#   bash scripts/e2e.sh                     # every scenario
#   bash scripts/e2e.sh --only mpi,quota    # some (--list names them); other flags go to the suite
#
# Binaries: $KUBEBUILDER_ASSETS (envtest's convention: etcd and kube-apiserver, plus
# kube-controller-manager and kube-scheduler of the same version), else the folder the
# workplace's kube-local/build.sh builds into ($KUBE_LOCAL/bin, /tmp/kube-local/bin by default).
# Without them it says so and exits 2: it never passes without having run.
# Upstream CRDs: $TRAINYARD_E2E_CRDS, else ../shared/reference/upstream-crds when it exists.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "e2e: $*" >&2; exit 2; }

if [ -z "${KUBEBUILDER_ASSETS:-}" ]; then
  local_bin="${KUBE_LOCAL:-/tmp/kube-local}/bin"
  if [ -x "$local_bin/kube-apiserver" ]; then
    export KUBEBUILDER_ASSETS="$local_bin"
  else
    fail "no control-plane binaries: set KUBEBUILDER_ASSETS to a folder with etcd, kube-apiserver, kube-controller-manager and kube-scheduler (README: \"End-to-end suite\"); nothing was tested"
  fi
fi
for b in etcd kube-apiserver kube-controller-manager kube-scheduler; do
  [ -x "$KUBEBUILDER_ASSETS/$b" ] || fail "$KUBEBUILDER_ASSETS has no executable $b; nothing was tested"
done

if [ -z "${TRAINYARD_E2E_CRDS:-}" ]; then
  if [ -d ../shared/reference/upstream-crds ]; then
    export TRAINYARD_E2E_CRDS=../shared/reference/upstream-crds
  else
    fail "no upstream CRDs: set TRAINYARD_E2E_CRDS to a folder with the CRD YAML of Trainer v2.3, JobSet v0.12 and LeaderWorkerSet v0.10 (README: \"End-to-end suite\"); nothing was tested"
  fi
fi

# The real Helm SDK, in the project's pinned Python environment.
TRAINYARD_E2E_PYTHON=$(bash scripts/python-env.sh)
export TRAINYARD_E2E_PYTHON

echo "==> building the release binary and the suite"
cargo build --release --locked -p trainyard -p trainyard-e2e --bin trainyard --bin trainyard-e2e

echo "==> binaries: $KUBEBUILDER_ASSETS ($("$KUBEBUILDER_ASSETS/kube-apiserver" --version 2>/dev/null || echo "version unknown"))"
exec target/release/trainyard-e2e --trainyard target/release/trainyard "$@"
