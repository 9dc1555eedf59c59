#!/usr/bin/env bash
# The published ports at scale: SCALE_ACTORS (100) CPU actors, each with a
# port of its own, all suspended, then one request to each sent at once,
# through the real stasisd, runsc and Stasis's CNI bridge. Prints a table;
# the JSON goes to SCALE_OUT (default docs/results/serve-scale.json). Needs
# root, runsc and the CNI plugins (scripts/install-cni.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/cgo-env.sh
scripts/install-cni.sh >/dev/null
export SCALE_OUT="${SCALE_OUT:-$PWD/docs/results/serve-scale.json}"
go test -tags loadbench -count=1 -v -run TestServeScale -timeout 60m ./integration 2>&1 | grep -v '^=== RUN'
