#!/usr/bin/env bash
# Builds the release artefacts for VERSION (vMAJOR.MINOR.PATCH) into dist/:
# stasis-cuda (static, no cgo) and stasis (cgo, for NVML; arm64 is built with
# Debian's aarch64-linux-gnu-gcc, installed when missing) for linux/amd64 and
# linux/arm64, stamped with the version, as tarballs with SHA256SUMS. Tag the commit (git tag -a VERSION)
# so that `go install github.com/stasis-run/stasis/cmd/stasis-cuda@VERSION`
# gives the same version.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:?usage: scripts/release.sh vMAJOR.MINOR.PATCH}"
[[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || { echo "release: $version is not a semantic version such as v0.1.0" >&2; exit 2; }
ldflags="-s -w -X github.com/stasis-run/stasis/internal/buildinfo.version=$version"
source scripts/lib/cgo-env.sh
if ! command -v aarch64-linux-gnu-gcc >/dev/null; then
	apt-get update -qq && apt-get install -y -qq gcc-aarch64-linux-gnu >/dev/null
fi
declare -A cc=([amd64]=cc [arm64]=aarch64-linux-gnu-gcc)
rm -rf dist && mkdir -p dist
for arch in amd64 arm64; do
	stage="dist/stasis-$version-linux-$arch"
	mkdir -p "$stage"
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags="$ldflags" -o "$stage/stasis-cuda" ./cmd/stasis-cuda
	# A micro-VM guest's /init: static.
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags="$ldflags" -o "$stage/stasis-agent" ./cmd/stasis-agent
	CC=${cc[$arch]} GOOS=linux GOARCH=$arch go build -trimpath -ldflags="$ldflags" -o "$stage/stasis" ./cmd/stasis
	cp README.md "$stage/"
	tar -C dist -czf "$stage.tar.gz" "$(basename "$stage")"
	rm -rf "$stage"
done
(cd dist && sha256sum ./*.tar.gz >SHA256SUMS)
ls -l dist
