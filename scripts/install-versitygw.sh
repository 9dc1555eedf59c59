#!/usr/bin/env bash
# Builds versitygw, an S3-compatible server, from the Go module proxy at a
# pinned version, for the snapshot store's S3 tests. Installs it as
# $PREFIX/bin/versitygw (default /usr/local); idempotent.
set -euo pipefail

VERSITYGW_VERSION="${VERSITYGW_VERSION:-v1.8.0}"
PREFIX="${PREFIX:-/usr/local}"
dest="$PREFIX/bin/versitygw"
stamp="$PREFIX/share/stasis/versitygw.version"

if [[ -x "$dest" && -f "$stamp" && "$(cat "$stamp")" == "$VERSITYGW_VERSION" ]]; then
	echo "versitygw $VERSITYGW_VERSION already installed at $dest"
	exit 0
fi
command -v go >/dev/null || { echo "install-versitygw: go is needed to build versitygw" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "building versitygw $VERSITYGW_VERSION (a few minutes on 2 cores)"
GOBIN="$work" CGO_ENABLED=0 go install -trimpath -ldflags="-s -w" "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
install -D -m 0755 "$work/versitygw" "$dest"
mkdir -p "$(dirname "$stamp")"
echo "$VERSITYGW_VERSION" >"$stamp"
echo "installed $dest"
