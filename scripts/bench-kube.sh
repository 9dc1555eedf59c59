#!/usr/bin/env bash
# The fleet benchmark: STASIS_FLEET_ACTORS (default 100) counter actors on
# three nodes behind a real kube-apiserver, one node drained; prints the
# time to place them, the time to drain and the controller's memory. Needs
# root and what scripts/test.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/cgo-env.sh
go test -tags kubebench -count=1 -v -run TestFleetDrainBench -timeout 60m ./integration 2>&1 | grep -E '^\||RESULT|FAIL|ok'
