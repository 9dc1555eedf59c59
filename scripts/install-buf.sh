#!/usr/bin/env bash
# Builds buf, the protobuf tool that lints stasisd's API (api/proto), checks
# it for breaking changes and generates api/gen, from the Go module proxy at
# a pinned version. Installs it as $PREFIX/bin/buf (default /usr/local).
# Idempotent.
set -euo pipefail
source "$(dirname "$0")/lib/go-install-pinned.sh"
go_install_pinned buf github.com/bufbuild/buf/cmd/buf "${BUF_VERSION:-v1.75.0}" "about 2 minutes on 2 cores"
