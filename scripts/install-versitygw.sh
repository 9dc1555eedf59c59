#!/usr/bin/env bash
# Builds versitygw, an S3-compatible server, from the Go module proxy at a
# pinned version, for the snapshot store's S3 tests. Installs it as
# $PREFIX/bin/versitygw (default /usr/local). Idempotent.
set -euo pipefail
source "$(dirname "$0")/lib/go-install-pinned.sh"
go_install_pinned versitygw github.com/versity/versitygw/cmd/versitygw "${VERSITYGW_VERSION:-v1.8.0}" "a few minutes on 2 cores"
