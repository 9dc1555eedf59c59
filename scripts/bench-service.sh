#!/usr/bin/env bash
# stasisd's load benchmark: LOAD_ACTORS (20) CPU actors suspended and resumed
# in a loop by LOAD_PARALLEL (4) workers for LOAD_DURATION (10m), through the
# real stasisd and runsc. Prints a table; the JSON goes to LOAD_OUT
# (default docs/results/service-load.json). Needs root and runsc.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/cgo-env.sh
export LOAD_OUT="${LOAD_OUT:-$PWD/docs/results/service-load.json}"
go test -tags loadbench -count=1 -v -run TestServiceLoad -timeout 60m ./integration 2>&1 | grep -v '^=== RUN'
