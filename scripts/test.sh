#!/usr/bin/env bash
# The project's whole test suite, as CI runs it: formatting, lints, the dependency rule of the
# sans-IO core, every test of every crate, and the offline Kubernetes manifest checks (Helm chart
# lint/render/validation, rendered JobSets/LeaderWorkerSets and the sweep's Indexed Job against
# upstream schemas), the chart's Grafana dashboard against Grafana's published dashboard schema,
# and the Slurm bridge (and sweeps run as Slurm job arrays) against a real local Slurm. Needs the
# Rust toolchain (cargo with rustfmt and clippy), python3 and node with npm; it installs the pinned
# Python tools into target/pyenv (scripts/python-env.sh), the pinned npm packages into
# target/dashboard-env (scripts/dashboard-env.sh) and, on Debian, the Slurm packages
# (scripts/slurm/start.sh, as root or through sudo) and Chromium for the HTML reports
# (scripts/chromium.sh) on first use. It also builds the container image without a daemon and runs
# it from its unpacked root file system, and runs the end-to-end suite on a real Kubernetes control
# plane where the binaries are (scripts/e2e.sh; it says so where they are not).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is missing: install the Rust toolchain (rustup) first" >&2
  exit 1
fi

# A fresh clone builds every crate once: incremental caches would only add gigabytes of disk.
if [ "${CI:-}" = "true" ]; then
  export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
fi

step "formatting (cargo fmt --check)"
if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all -- --check
else
  echo "rustfmt is not installed; skipping the format check"
fi

step "lints (cargo clippy, warnings are errors)"
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --workspace --all-targets --locked -- -D warnings
else
  echo "clippy is not installed; skipping lints"
fi

step "the core crates stay free of kube, tokio and tonic"
for crate in trainyard-topology trainyard-policies trainyard-simulator trainyard-bridges trainyard-slurm; do
  bad=$(cargo tree -p "$crate" -e normal --prefix none --locked | awk '{print $1}' \
        | grep -E '^(kube|kube-[a-z]+|k8s-openapi|tokio|tonic)$' | sort -u || true)
  if [ -n "$bad" ]; then
    echo "$crate depends on: $bad" >&2
    exit 1
  fi
  echo "$crate: ok"
done

step "Python tools for the manifest checks (scripts/python-env.sh)"
py=$(bash scripts/python-env.sh)
echo "$py"

step "rendered JobSets, LeaderWorkerSets, binder PodGroups and the sweep's Indexed Job against the upstream schemas"
"$py" scripts/check_workloads.py bridges/tests/golden tests/golden/render tests/golden/sweep
if "$py" scripts/check_workloads.py scripts/testdata/workloads >/dev/null; then
  echo "check_workloads.py accepted scripts/testdata/workloads/bad.job.yaml" >&2
  exit 1
fi
bad_groups=$("$py" scripts/check_workloads.py scripts/testdata/podgroups || true)
for want in "minAvailable' was unexpected" "'strict' is not one of" "the linked templates make 4 pods"; do
  if ! grep -qF "$want" <<<"$bad_groups"; then
    echo "check_workloads.py did not report \"$want\" in scripts/testdata/podgroups/bad.jobset.yaml" >&2
    exit 1
  fi
done

step "trainyard's CRDs are structural; the Kubernetes examples and fixtures obey them"
"$py" scripts/check_examples.py charts/trainyard/crds,charts/trainer-crds/crds examples/kubernetes/*.yaml examples/slurm/*.yaml bridges/tests/fixtures/*.yaml tests/fixtures/render/*.yaml
if "$py" scripts/check_examples.py charts/trainyard/crds,charts/trainer-crds/crds scripts/testdata/examples/bad.yaml >/dev/null; then
  echo "check_examples.py accepted scripts/testdata/examples/bad.yaml" >&2
  exit 1
fi

step "helm chart: lint, render, validate (offline, real Helm SDK)"
bash scripts/check-chart.sh

step "Grafana dashboard against Grafana's dashboard schema"
# Pinned @grafana/schema and the TypeScript compiler from npm (scripts/dashboard-env.sh), then
# the lint, and the proof that both reject scripts/testdata/dashboard/bad.json.
bash scripts/check-dashboard.sh

step "Slurm bridge, the controller's Slurm queues and Slurm sweeps against a real local Slurm (scripts/slurm/with-slurm.sh)"
log=$(mktemp)
slurm_log=$(mktemp)
trap 'rm -f "$log" "$slurm_log"' EXIT
set +e
# The bridge's own tests, then the controller's Slurm front end and `trainyard sweep --slurm`, on
# one local cluster.
bash scripts/slurm/with-slurm.sh bash -c '
  cargo test -p trainyard-slurm --features client --locked --test local -- --include-ignored --test-threads=1 &&
  cargo test -p trainyard --locked --test it controller::slurm_live -- --include-ignored --test-threads=1 &&
  cargo test -p trainyard --locked --test it sweep::slurm -- --include-ignored --test-threads=1
' 2>&1 | tee "$slurm_log"
slurm_status=${PIPESTATUS[0]}
set -e
if [ "$slurm_status" -ne 0 ]; then
  echo "the Slurm bridge tests failed" >&2
  exit "$slurm_status"
fi

step "HTML reports in a real headless Chromium (scripts/chromium.sh installs Debian's chromium)"
html_log=$(mktemp)
trap 'rm -f "$log" "$slurm_log" "$html_log"' EXIT
CHROMIUM=$(bash scripts/chromium.sh)
export CHROMIUM
echo "$CHROMIUM"
set +e
cargo test -p trainyard --locked --test it html_report -- --include-ignored 2>&1 | tee "$html_log"
html_status=${PIPESTATUS[0]}
set -e
if [ "$html_status" -ne 0 ]; then
  echo "the HTML report tests failed" >&2
  exit "$html_status"
fi

step "the container image, built without a daemon and run from its own root file system (scripts/image/)"
# The release binary and exactly the libraries it links, as one OCI layout + docker-save tarball;
# check.sh unpacks it, checks every digest and runs `trainyard --version` inside it (chroot).
cargo build --release --locked -p trainyard --bin trainyard
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
python3 scripts/image/build.py --binary target/release/trainyard --out target/image/trainyard.tar \
  --tag "trainyard:$version" --version "$version" --revision "$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [ "$(id -u)" -eq 0 ]; then
  bash scripts/image/check.sh target/image/trainyard.tar
elif command -v sudo >/dev/null 2>&1; then
  sudo bash scripts/image/check.sh target/image/trainyard.tar
else
  bash scripts/image/check.sh target/image/trainyard.tar
fi

step "end-to-end suite on a real Kubernetes control plane (scripts/e2e.sh)"
# Run where the control-plane binaries are: $KUBEBUILDER_ASSETS, or the folder the workplace's
# kube-local/build.sh builds into. Said plainly when they are not: nothing is passed silently.
# The upstream CRDs likewise: $TRAINYARD_E2E_CRDS, or ../shared/reference/upstream-crds.
kube_bin="${KUBEBUILDER_ASSETS:-${KUBE_LOCAL:-/tmp/kube-local}/bin}"
crds="${TRAINYARD_E2E_CRDS:-../shared/reference/upstream-crds}"
if [ ! -x "$kube_bin/kube-apiserver" ]; then
  echo "NOT RUN: no control-plane binaries ($kube_bin has no kube-apiserver; set KUBEBUILDER_ASSETS, README \"End-to-end suite\")"
elif [ ! -d "$crds" ]; then
  echo "NOT RUN: no upstream CRDs ($crds is not a folder; set TRAINYARD_E2E_CRDS, README \"End-to-end suite\")"
else
  KUBEBUILDER_ASSETS="$kube_bin" TRAINYARD_E2E_CRDS="$crds" bash scripts/e2e.sh
fi

step "tests (cargo test --workspace)"
set +e
cargo test --workspace --locked 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# One closing line over all test binaries (cargo prints one per binary, the last often a
# doc-test run with nothing in it); the Chromium tests, ignored in the workspace run, count
# from their own run.
cat "$slurm_log" >> "$log"
grep -E '^test html_report::.*(renders_in_chromium) \.\.\. ok$' "$html_log" \
  | awk '{ n++ } END { printf "test result: ok. %d passed; 0 failed; (Chromium)\n", n }' >> "$log"

du -sh target 2>/dev/null | awk '{ print "disk used by target/: " $1 }'
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed;?$/) p += $(i-1); if ($i ~ /^failed;?$/) f += $(i-1) } }
     END { printf "\ntests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
