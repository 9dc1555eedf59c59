#!/usr/bin/env bash
# Generates stasisd's API code (api/gen: the Go types, the Connect client
# and handler) from api/proto with buf (scripts/install-buf.sh) and the code
# generators go.mod pins; run it after changing the proto file, and commit
# what it writes.
#
#   scripts/gen-api.sh            write api/gen
#   scripts/gen-api.sh --check    lint the proto file, check it against the
#                                 API as last released (api/released.binpb)
#                                 and that api/gen is what it generates
#   scripts/gen-api.sh --release  record the proto file as the API released
set -euo pipefail
cd "$(dirname "$0")/.."
command -v buf >/dev/null || { echo "gen-api: buf is needed: scripts/install-buf.sh" >&2; exit 1; }
case "${1:-}" in
"")
	buf generate
	;;
--check)
	buf lint
	buf breaking --against api/released.binpb
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	buf generate --output "$work"
	if ! diff -r api/gen "$work/api/gen" >/dev/null; then
		echo "gen-api: api/gen is not what api/proto generates: run scripts/gen-api.sh and commit what it writes" >&2
		diff -r api/gen "$work/api/gen" | head -20 >&2
		exit 1
	fi
	echo "api/proto lints, breaks nothing released, and api/gen is current"
	;;
--release)
	buf build --output api/released.binpb
	;;
*)
	echo "usage: scripts/gen-api.sh [--check|--release]" >&2
	exit 2
	;;
esac
