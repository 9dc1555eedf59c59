#!/usr/bin/env bash
# Builds runsc from the Go module proxy at the version this project is tested with and
# installs it as $PREFIX/bin/runsc (default /usr/local). Idempotent: an installed runsc of
# the pinned version is left alone.
set -euo pipefail

GVISOR_VERSION="${GVISOR_VERSION:-v0.0.0-20260527191743-a81fd9dd382e}"
PREFIX="${PREFIX:-/usr/local}"
dest="$PREFIX/bin/runsc"
stamp="$PREFIX/share/stasis/runsc.version"

if [[ -x "$dest" && -f "$stamp" && "$(cat "$stamp")" == "$GVISOR_VERSION" ]]; then
	echo "runsc $GVISOR_VERSION already installed at $dest"
	exit 0
fi

command -v go >/dev/null || { echo "install-runsc: go is needed to build runsc (https://go.dev/doc/install)" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "building runsc gvisor.dev/gvisor@$GVISOR_VERSION (about a minute on 2 cores)"
GOBIN="$work" CGO_ENABLED=0 go install -trimpath -ldflags="-s -w" "gvisor.dev/gvisor/runsc@$GVISOR_VERSION"
install -D -m 0755 "$work/runsc" "$dest"
mkdir -p "$(dirname "$stamp")"
echo "$GVISOR_VERSION" >"$stamp"
echo "installed $dest ($("$dest" --version | head -1))"
