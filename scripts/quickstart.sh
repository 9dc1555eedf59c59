#!/usr/bin/env bash
# The quick start's main job: installs runsc (pinned), builds stasis, and runs
# a demo actor through suspend and resume on embedded defaults (snapshots in
# /var/lib/stasis/demo). Needs root and Go 1.26+; installs gcc when missing
# (stasis reads GPUs through NVML with cgo).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) -ne 0 ]]; then
	echo "scripts/quickstart.sh: runsc sandboxes need root (run with sudo)" >&2
	exit 1
fi
scripts/install-runsc.sh
source scripts/lib/cgo-env.sh
mkdir -p bin
go build -o bin/stasis ./cmd/stasis
CGO_ENABLED=0 go build -o bin/stasis-cuda ./cmd/stasis-cuda
exec bin/stasis demo "$@"
