#!/usr/bin/env bash
# Builds runsc from the Go module proxy at a version this project is tested
# with and installs it as $PREFIX/bin/runsc. Idempotent.
#
#   scripts/install-runsc.sh              the default: gVisor of 2026-09-05, which
#                                         has checkpoint --cuda-checkpoint-path and
#                                         knows driver 580.159.04 (PREFIX /usr/local)
#   scripts/install-runsc.sh --reference  the May 2026 build, the "no flag" reference
#                                         the tests also run against
#                                         (PREFIX /usr/local/lib/stasis/runsc-reference)
#
# GVISOR_VERSION overrides the version.
set -euo pipefail
source "$(dirname "$0")/lib/go-install-pinned.sh"
DEFAULT_VERSION=v0.0.0-20260905035102-160fafc42237
REFERENCE_VERSION=v0.0.0-20260527191743-a81fd9dd382e
version=$DEFAULT_VERSION
if [[ "${1:-}" == "--reference" ]]; then
	version=$REFERENCE_VERSION
	export PREFIX="${PREFIX:-/usr/local/lib/stasis/runsc-reference}"
elif [[ -n "${1:-}" ]]; then
	echo "usage: $0 [--reference]" >&2
	exit 2
fi
go_install_pinned runsc gvisor.dev/gvisor/runsc "${GVISOR_VERSION:-$version}" "about 2 minutes on 2 cores with a cold build cache"
