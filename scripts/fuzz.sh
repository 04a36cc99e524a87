#!/usr/bin/env bash
# The long fuzz run: every reader, then the commands' flags through the release binary, for
# MINUTES minutes in all (default 10), split evenly. Failing inputs are kept under
# fuzz/regressions/ (commit them with the fix); exits 1 when anything failed.
#
#   bash scripts/fuzz.sh [MINUTES] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
minutes="${1:-10}"
seed="${2:-$(date +%s)}"
cargo build --release --locked -p trainyard-fuzz -p trainyard --bin trainyard-fuzz --bin trainyard
targets=$(target/release/trainyard-fuzz --help | sed -n 's/^targets: //p' | tr ',' ' ' | wc -w)
# Every target plus the flags share the time.
per=$(( minutes * 60 / (targets + 1) ))
echo "==> fuzzing $targets targets and the flags for ${per}s each (seed $seed)"
exec target/release/trainyard-fuzz --seconds "$per" --seed "$seed" --trainyard target/release/trainyard
