#!/usr/bin/env bash
# Builds helm, which lints and renders the chart (deploy/helm/stasis) in
# scripts/test.sh and for the fleet tests, from the Go module proxy at a
# pinned version. Installs it as $PREFIX/bin/helm (default /usr/local).
# Idempotent.
set -euo pipefail
source "$(dirname "$0")/lib/go-install-pinned.sh"
go_install_pinned helm helm.sh/helm/v4/cmd/helm "${HELM_VERSION:-v4.3.2}" "a few minutes on 2 cores"
