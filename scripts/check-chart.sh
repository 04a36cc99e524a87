#!/usr/bin/env bash
# Offline checks of the Helm chart charts/trainyard (no cluster, no helm binary): the chart must
# pass scripts/check_chart.py with its default values and its ci/ variants, and the check must
# fail, with the expected message, on every deliberately broken input in scripts/testdata/chart/.
# Needs python3 with venv; scripts/python-env.sh installs the pinned tools into target/pyenv.
set -euo pipefail
cd "$(dirname "$0")/.."

chart=charts/trainyard
data=scripts/testdata/chart
rbac=(--rbac-expect "$data/expected-rbac.yaml")
py=$(bash scripts/python-env.sh)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

# ok NAME ARGS...: check_chart.py must succeed.
ok() {
  local name=$1 out
  shift
  if out=$("$py" scripts/check_chart.py "$@" 2>"$work/stderr"); then
    echo "ok    $name: ${out##*$'\n'}"
    passed=$((passed + 1))
  else
    echo "FAIL  $name: expected success, got:"
    sed 's/^/        /' <<<"$out"
    sed 's/^/        stderr: /' "$work/stderr"
    failed=$((failed + 1))
  fi
}

# bites NAME "MESSAGE|MESSAGE..." ARGS...: check_chart.py must exit 1 and print every message.
bites() {
  local name=$1 messages=$2 out rc=0 missing=() wanted=() m
  shift 2
  out=$("$py" scripts/check_chart.py "$@" 2>"$work/stderr") || rc=$?
  IFS='|' read -r -a wanted <<<"$messages"
  for m in "${wanted[@]}"; do
    grep -qF -- "$m" <<<"$out" || missing+=("$m")
  done
  if [ "$rc" -eq 1 ] && [ ${#missing[@]} -eq 0 ]; then
    echo "ok    $name: fails as expected (${#wanted[@]} message(s) found)"
    passed=$((passed + 1))
  else
    echo "FAIL  $name: expected exit 1 with: ${wanted[*]}; got exit $rc, missing: ${missing[*]:-none}"
    sed 's/^/        /' <<<"$out"
    failed=$((failed + 1))
  fi
}

# overlay NAME FILE...: a copy of the chart with extra templates/ or crds/ files from testdata;
# prints its path.
overlay() {
  local dir="$work/$1" f
  shift
  mkdir -p "$dir"
  cp -R "$chart" "$dir/trainyard"
  for f in "$@"; do
    mkdir -p "$dir/trainyard/$(dirname "$f")"
    cp "$data/$f" "$dir/trainyard/$f"
  done
  echo "$dir/trainyard"
}

echo "== the chart passes"
ok "defaults, Kubernetes 1.34" "${rbac[@]}" --manifest "$work/defaults.yaml" "$chart" 1.34.0
if grep -qF 'templates/dashboard-configmap.yaml' "$work/defaults.yaml"; then
  echo "FAIL  defaults render the Grafana dashboard ConfigMap (grafanaDashboard.enabled is false)"
  failed=$((failed + 1))
else
  passed=$((passed + 1))
fi
ok "defaults, Kubernetes 1.36" "${rbac[@]}" "$chart" 1.36.0
ok "serviceMonitor.enabled=true" "${rbac[@]}" "$chart" 1.34.0 serviceMonitor.enabled=true
ok "ci/servicemonitor-values.yaml" "${rbac[@]}" "$chart" 1.35.0 "$chart/ci/servicemonitor-values.yaml"
ok "ci/companion-values.yaml" "${rbac[@]}" --manifest "$work/companion.yaml" "$chart" 1.34.0 \
  "$chart/ci/companion-values.yaml"
for want in '--mode=companion' 'replicas: 2' 'trainyard@sha256:' 'name: team-b' '--log-level=debug'; do
  if grep -qF -- "$want" "$work/companion.yaml"; then
    passed=$((passed + 1))
  else
    echo "FAIL  companion render lacks: $want"
    failed=$((failed + 1))
  fi
done
ok "ci/api-values.yaml" --rbac-expect "$data/expected-rbac-api.yaml" --manifest "$work/api.yaml" "$chart" 1.34.0 \
  "$chart/ci/api-values.yaml"
for want in '--api-bind=0.0.0.0:9443' '--api-rate=5' 'secretName: trainyard-api-tls' 'appProtocol: grpc'; do
  if grep -qF -- "$want" "$work/api.yaml"; then
    passed=$((passed + 1))
  else
    echo "FAIL  api render lacks: $want"
    failed=$((failed + 1))
  fi
done
bites "api.enabled without its TLS Secret" "/api/tlsSecret': minLength" \
  "$chart" 1.34.0 api.enabled=true
ok "ci/dra-allocate-values.yaml" --rbac-expect "$data/expected-rbac-allocate.yaml" "$chart" 1.36.0 \
  "$chart/ci/dra-allocate-values.yaml"
ok "ci/slurm-values.yaml" "${rbac[@]}" --manifest "$work/slurm.yaml" "$chart" 1.34.0 "$chart/ci/slurm-values.yaml"
# Whole lines (indentation aside): a bare `- --slurm` must not be satisfied by `- --slurm-poll`.
# A file, not a pipe: under pipefail, grep -q quitting early would fail the pipeline with SIGPIPE.
sed 's/^ *//' "$work/slurm.yaml" >"$work/slurm.lines"
for want in '- --slurm' '- --slurm-poll=15' '- --slurm-cluster=hpc-a' '- name: SLURMRESTD_TOKEN_FILE' \
  'value: /var/run/trainyard/slurm/jwt' 'secretName: slurm-jwt' 'mountPath: /var/run/trainyard/slurm' \
  'fsGroup: 65532'; do
  if grep -qxF -- "$want" "$work/slurm.lines"; then
    passed=$((passed + 1))
  else
    echo "FAIL  slurm render lacks: $want"
    failed=$((failed + 1))
  fi
done
ok "ci/manager-values.yaml" --rbac-expect "$data/expected-rbac-manager.yaml" --manifest "$work/manager.yaml" \
  "$chart" 1.36.0 "$chart/ci/manager-values.yaml"
sed 's/^ *//' "$work/manager.yaml" >"$work/manager.lines"
for want in '- --mode=manager' 'kind: WorkerCluster' 'name: east-kubeconfig' 'key: config'; do
  if grep -qxF -- "$want" "$work/manager.lines"; then
    passed=$((passed + 1))
  else
    echo "FAIL  manager render lacks: $want"
    failed=$((failed + 1))
  fi
done
bites "fleet.workers without mode manager" "at '/mode': value must be 'manager'" \
  "$chart" 1.34.0 "$data/bad-fleet-standalone.yaml"
ok "ci/dashboard-values.yaml" "${rbac[@]}" --manifest "$work/dashboard.yaml" "$chart" 1.34.0 \
  "$chart/ci/dashboard-values.yaml"
# The ConfigMap carries the sidecar's label, the folder annotation, and the file byte for byte.
if out=$("$py" - "$work/dashboard.yaml" "$chart/dashboards/trainyard.json" 2>&1 <<'EOF'
import sys, yaml
manifest, dashboard = sys.argv[1:]
cms = [d for d in yaml.safe_load_all(open(manifest, encoding="utf-8"))
       if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "ci-trainyard-dashboard"]
if len(cms) != 1:
    sys.exit(f"{len(cms)} ConfigMap(s) ci-trainyard-dashboard rendered, want 1")
meta, data = cms[0]["metadata"], cms[0].get("data") or {}
if meta.get("namespace") != "monitoring":
    sys.exit(f"namespace {meta.get('namespace')!r}, want 'monitoring'")
if (meta.get("labels") or {}).get("grafana_dashboard") != "1":
    sys.exit(f"labels {meta.get('labels')} lack grafana_dashboard: '1'")
if meta.get("annotations") != {"grafana_folder": "trainyard"}:
    sys.exit(f"annotations {meta.get('annotations')}, want grafana_folder: trainyard")
if data.get("trainyard.json") != open(dashboard, encoding="utf-8").read().strip():
    sys.exit(f"data trainyard.json differs from {dashboard}")
EOF
); then
  passed=$((passed + 1))
else
  echo "FAIL  dashboard ConfigMap: $out"
  failed=$((failed + 1))
fi
ok "both ci/ files merged" "${rbac[@]}" "$chart" 1.34.0 "$chart/ci/companion-values.yaml" \
  "$chart/ci/servicemonitor-values.yaml"
ok "rbac.create=false, no ServiceAccount" "$chart" 1.34.0 rbac.create=false serviceAccount.create=false \
  serviceAccount.name=existing
ok "charts/trainer-crds (Trainer's CRDs, for clusters without Trainer)" charts/trainer-crds 1.34.0
# trainyard's own chart never ships Trainer's CRDs: Helm would apply them over Trainer's.
if ls "$chart"/crds/trainer.* >/dev/null 2>&1; then
  echo "FAIL  $chart/crds holds Trainer's CRDs"
  failed=$((failed + 1))
else
  passed=$((passed + 1))
fi
ok "a CRD in crds/ and a valid custom resource" \
  "$(overlay crd-good crds/samples.yaml templates/sample-good.yaml)" 1.34.0

echo "== the check bites"
bites "Kubernetes older than kubeVersion" "incompatible with Kubernetes v1.33.0" "$chart" 1.33.0
bites "Kubernetes unknown to kubernetes-validate" "does not support version 1.38" "$chart" 1.38.0
bites "mode outside the enum" "at '/mode'" "$chart" "$data/bad-mode.yaml"
bites "misspelt values key" "additional properties 'replica' not allowed" "$chart" "$data/bad-typo.yaml"
bites "replicas without leader election" "at '/leaderElection/enabled'" "$chart" "$data/bad-leader.yaml"
bites "slurm enabled without a URL" "at '/slurm/url'" "$chart" "$data/bad-slurm-url.yaml"
bites "slurm enabled in companion mode" "at '/mode': value must be 'standalone'" "$chart" "$data/bad-slurm-companion.yaml"
bites "root user, bad tag, unnamed ServiceAccount" \
  "at '/securityContext/runAsUser'|at '/image/tag'|at '/serviceAccount/name'" "$chart" "$data/bad-identity.yaml"
bites "grafanaDashboard: enabled a string, misspelt key, numeric label value, chart label" \
  "at '/grafanaDashboard/enabled': got string, want boolean|additional properties 'namespce' not allowed|at '/grafanaDashboard/labelValue': got number, want string|at '/grafanaDashboard/label': 'not' failed" \
  "$chart" "$data/bad-dashboard.yaml"
bites "one port for metrics and health" "metrics.port and health.port must differ" "$chart" "$data/bad-ports.yaml"
bites "misspelt policy key" "invalid propertyName 'queus'" "$chart" "$data/bad-policy.yaml"
bites "unknown Pod field (kubernetes-validate strict)" "Deployment/ci-trainyard|operatr" \
  "$chart" "$data/bad-toleration.yaml"
bites "unknown ServiceMonitor field (hand schema)" "relabelings.0|'sourceLabel' was unexpected" \
  "$chart" "$data/bad-relabel.yaml"
bites "scrape timeout over the interval" "scrapeTimeout exceeds the interval" "$chart" "$data/bad-scrape.yaml"
bites "RBAC grants differ from the reviewed list" \
  "pods: grants ['patch']|leaderworkersets: grants|services: lacks ['get']" \
  --rbac-expect "$data/expected-rbac-narrow.yaml" "$chart"
bites "wildcard and listing Secrets in RBAC" "rules.1.verbs has a wildcard|rules.0 grants list on secrets" \
  "$(overlay wildcard templates/wildcard-rbac.yaml)"
bites "binding cluster-admin" "binds the built-in ClusterRole cluster-admin" \
  "$(overlay admin templates/bind-cluster-admin.yaml)"
bites "unhardened pod" "must run as non-root|readOnlyRootFilesystem must be true|drop must contain ALL|seccompProfile" \
  "$(overlay job templates/insecure-job.yaml)"
bites "references to nothing" \
  "needs ConfigMap sidecar-config|readinessProbe uses port http|targetPort web is no container port|selector {'app': 'nobody'} matches no pods|ServiceMonitor/ci-sidecar: selects no Service" \
  "$(overlay refs templates/dangling-refs.yaml)"
bites "kind without schema or CRD" "Gadget/ci-gadget: SchemaNotFoundError" \
  "$(overlay gadget templates/unknown-kind.yaml)"
bites "custom resource against its CRD" \
  "spec.size: 0 is less than the minimum of 1|spec.mode: 'sidecar' is not one of|'colour' was unexpected|spec.memory: [2] is not of type|spec.labels.team: 7 is not of type 'string'" \
  "$(overlay crd-bad crds/samples.yaml templates/sample-bad.yaml)"
bites "custom resource of an unserved version" "v1alpha1 is not served" \
  "$(overlay crd-old crds/samples.yaml templates/sample-unserved.yaml)"

echo "chart checks: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
