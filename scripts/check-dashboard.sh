#!/usr/bin/env bash
# Offline check of the Grafana dashboard the chart ships (charts/trainyard/dashboards/): it must pass
# scripts/check_dashboard.mjs (Grafana's published dashboard schema, then the lint), and the check
# must fail, with the expected messages, on the deliberately broken scripts/testdata/dashboard/bad.json.
# Needs node and npm; scripts/dashboard-env.sh installs the pinned packages into target/dashboard-env.
set -euo pipefail
cd "$(dirname "$0")/.."

DASHBOARD_ENV=$(bash scripts/dashboard-env.sh)
export DASHBOARD_ENV
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

check() { node scripts/check_dashboard.mjs "$@"; }

echo "== the dashboard passes"
for f in charts/trainyard/dashboards/*.json; do
  if out=$(check "$f" 2>"$work/stderr"); then
    echo "ok    $out"
    passed=$((passed + 1))
  else
    echo "FAIL  $f: expected success, got:"
    sed 's/^/        /' <<<"$out"
    sed 's/^/        stderr: /' "$work/stderr"
    failed=$((failed + 1))
  fi
done

echo "== the check bites"
bad=scripts/testdata/dashboard/bad.json
rc=0
out=$(check "$bad" 2>"$work/stderr") || rc=$?
# One line per deliberate mistake in bad.json: the schema's findings, then the lint's.
expected=(
  "bad.json:6:3: refresh_interval: schema: Object literal may only specify known properties"
  "(panels.1) at fieldConfig.defaults.color.mode: schema: Type '\"pallete-classic\"' is not assignable"
  "(panels.1) at options.legend.displayMod: schema: Object literal may only specify known properties"
  "(panels.1) at targets.0.legendformat: schema: Object literal may only specify known properties"
  "(panels.1) at targets.0.expr: trainyard_queue_pendng is no metric trainyard exports"
  "(panels.2) at gridPos: {\"h\":8,\"w\":12,\"x\":6,\"y\":1} overlaps panel 2"
  "(panels.2) at datasource: has no datasource"
  "(panels.2) at targets.0.expr: uses \$queues, which is no variable of the dashboard"
  "(panels.3): has the id 3 of panel 3"
  "(panels.3) at targets.0.expr: is empty"
  "(panels.3) at targets.1.expr: trainyard_launch_latency_seconds is a histogram"
)
missing=()
for m in "${expected[@]}"; do
  grep -qF -- "$m" <<<"$out" || missing+=("$m")
done
if [ "$rc" -eq 1 ] && [ ${#missing[@]} -eq 0 ]; then
  echo "ok    $bad: fails as expected (${#expected[@]} message(s) found)"
  passed=$((passed + 1))
else
  echo "FAIL  $bad: expected exit 1 with every expected message; got exit $rc, missing:"
  printf '        %s\n' "${missing[@]}"
  sed 's/^/        /' <<<"$out"
  sed 's/^/        stderr: /' "$work/stderr"
  failed=$((failed + 1))
fi

echo "dashboard checks: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
