#!/usr/bin/env bash
# Builds the Debian package into dist/: stasis, stasisd and stasis-cuda, the
# pinned runsc (/usr/lib/stasis/bin/runsc), the systemd unit and the default
# config (packaging/). The packager is nfpm, built from the Go module proxy
# at a pinned version. Prints the package's path last.
#
#   scripts/build-deb.sh [vMAJOR.MINOR.PATCH]
#
# Without a version the package is 0.0.0~gitDATE.COMMIT, which sorts below
# every release. About 3 minutes on 2 cores the first time (runsc, nfpm),
# under a minute afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
NFPM_VERSION=v2.48.0
source scripts/lib/cgo-env.sh

version="${1:-}"
if [[ -n "$version" ]]; then
	[[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || { echo "build-deb: $version is not a semantic version such as v0.1.0" >&2; exit 2; }
	stamp=$version
	deb_version=${version#v}
	deb_version=${deb_version//-/\~}
else
	commit=$(git rev-parse --short=12 HEAD)
	deb_version="0.0.0~git$(git show -s --format=%cd --date=format:%Y%m%d HEAD).$commit"
	stamp="(devel) $commit"
fi
arch=$(go env GOARCH)
root=dist/deb/root
rm -rf "$root" && mkdir -p "$root/usr/bin"
ldflags="-s -w -X 'github.com/stasis-run/stasis/internal/buildinfo.version=$stamp'"
echo "building stasis, stasisd, stasis-cuda, stasis-agent $deb_version ($arch)"
go build -trimpath -ldflags="$ldflags" -o "$root/usr/bin/stasis" ./cmd/stasis
go build -trimpath -ldflags="$ldflags" -o "$root/usr/bin/stasisd" ./cmd/stasisd
CGO_ENABLED=0 go build -trimpath -ldflags="$ldflags" -o "$root/usr/bin/stasis-cuda" ./cmd/stasis-cuda
# The micro-VM guest agent is a guest's /init: static (the guest has no
# dynamic loader; stasis-agent initramfs refuses one that is not).
CGO_ENABLED=0 go build -trimpath -ldflags="$ldflags" -o "$root/usr/bin/stasis-agent" ./cmd/stasis-agent
# runsc is built once per pinned version into dist/deb/runsc, then copied.
PREFIX="$PWD/dist/deb/runsc" scripts/install-runsc.sh
install -D -m 0755 dist/deb/runsc/bin/runsc "$root/usr/lib/stasis/bin/runsc"
install -D -m 0644 dist/deb/runsc/share/stasis/runsc.version "$root/usr/lib/stasis/share/stasis/runsc.version"

# The cgo binaries need the newest glibc symbol version they link against.
glibc=$(objdump -T "$root/usr/bin/stasis" "$root/usr/bin/stasisd" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
export STASIS_DEB_VERSION=$deb_version STASIS_DEB_ARCH=$arch STASIS_DEB_GLIBC=${glibc#GLIBC_}
export STASIS_DEB_MAINTAINER="${STASIS_DEB_MAINTAINER:-Stasis developers <stasis@stasis.run>}"
deb="dist/stasis_${deb_version}_${arch}.deb"
rm -f "$deb"
go run "github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION" package --config packaging/nfpm.yaml --packager deb --target "$deb" >&2
echo "$deb"
