#!/usr/bin/env bash
# Builds fake-gcs-server, a Google Cloud Storage emulator, from the Go module
# proxy at a pinned version, for the snapshot store's GCS tests. Installs it
# as $PREFIX/bin/fake-gcs-server (default /usr/local). Idempotent.
set -euo pipefail
source "$(dirname "$0")/lib/go-install-pinned.sh"
go_install_pinned fake-gcs-server github.com/fsouza/fake-gcs-server "${FAKE_GCS_VERSION:-v1.56.1}" "a few minutes on 2 cores"
