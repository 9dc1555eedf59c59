#!/usr/bin/env bash
# Builds what scripts/gpu-e2e.sh runs on a GPU machine into .gpu-bundle/
# (ignored by git; carry it to the GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=.gpu-bundle
mkdir -p "$bundle"
git rev-parse HEAD >"$bundle/COMMIT" 2>/dev/null || echo uncommitted >"$bundle/COMMIT"
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$bundle/stasis-cuda" ./cmd/stasis-cuda
ls -la "$bundle"
