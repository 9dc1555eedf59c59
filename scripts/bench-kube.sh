#!/usr/bin/env bash
# The fleet at scale: STASIS_FLEET_ACTORS (default 100) counter actors on
# three nodes behind a real kube-apiserver, lease 15 s; prints the time to
# place them, the API server's requests at rest, a drain under a hung agent
# with the controller killed, a node whose stasisd is killed, and each
# component's CPU over each of these phases (integration TestFleetAtScale).
# Needs root and what scripts/test.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/cgo-env.sh
go test -tags kubebench -count=1 -v -run TestFleetAtScale -timeout 60m ./integration 2>&1 | grep -E '^\||^At rest|^CPU|RESULT|FAIL|ok|--- '
