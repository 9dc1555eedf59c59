#!/usr/bin/env bash
# Builds runsc from the Go module proxy at the version this project is tested
# with and installs it as $PREFIX/bin/runsc (default /usr/local). Idempotent.
set -euo pipefail
source "$(dirname "$0")/lib/go-install-pinned.sh"
go_install_pinned runsc gvisor.dev/gvisor/runsc "${GVISOR_VERSION:-v0.0.0-20260527191743-a81fd9dd382e}" "about a minute on 2 cores"
