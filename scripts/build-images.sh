#!/usr/bin/env bash
# Builds the Helm chart's two images (deploy/helm/stasis) into dist/images,
# without a container engine (cmd/internal/ociimage writes them):
#
#   stasis-kube  the fleet controller and the node agent's stand-alone image:
#                stasis-kube (static) and the CA certificates; user 65532.
#   stasis-node  the node pod's: the Debian package's files (stasis, stasisd,
#                stasis-cuda, stasis-agent, the pinned runsc at
#                /usr/lib/stasis/bin/runsc), stasis-kube, the CNI plugins at
#                /usr/local/lib/stasis/cni/bin, the C library stasisd and
#                stasis link against (Debian's libc6, the version this
#                machine has) and the CA certificates.
#
# Each as an OCI image layout (dist/images/NAME) and a docker-save archive
# (dist/images/NAME.tar: docker load, podman load, or crane push it to your
# registry). The tag is the chart's appVersion unless VERSION is given.
#
#   scripts/build-images.sh [VERSION]
#
# The node image holds what scripts/build-deb.sh puts in the package, built
# from this checkout (its runsc built once per pinned version).
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-$(sed -n 's/^appVersion: *//p' deploy/helm/stasis/Chart.yaml)}"
registry="${STASIS_IMAGE_REGISTRY:-ghcr.io/stasis-run}"
source scripts/lib/cgo-env.sh

# The Debian package's tree (dist/deb/root), built from this checkout.
scripts/build-deb.sh >/dev/null
scripts/install-cni.sh >/dev/null
cni=/usr/local/lib/stasis/cni/bin

out=dist/images
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$work/debs"

# Debian's packages, at the versions installed here: libc6 (what the cgo
# binaries were linked against) and ca-certificates (its bundle is made
# from them as update-ca-certificates does).
(cd "$work/debs" && apt-get download -qq -o APT::Sandbox::User=root "libc6=$(dpkg-query -W -f='${Version}' libc6)" "ca-certificates=$(dpkg-query -W -f='${Version}' ca-certificates)")
certs() {
	local root=$1 pkg
	pkg=$(mktemp -d)
	dpkg-deb -x "$work"/debs/ca-certificates_*.deb "$pkg"
	mkdir -p "$root/etc/ssl/certs"
	cat "$pkg"/usr/share/ca-certificates/mozilla/*.crt >"$root/etc/ssl/certs/ca-certificates.crt"
	rm -rf "$pkg"
}

ldflags="-s -w -X 'github.com/stasis-run/stasis/internal/buildinfo.version=$version'"
CGO_ENABLED=0 go build -trimpath -ldflags="$ldflags" -o "$work/stasis-kube" ./cmd/stasis-kube

kube=$work/kube
install -D -m 0755 "$work/stasis-kube" "$kube/usr/bin/stasis-kube"
certs "$kube"
go run ./cmd/internal/ociimage build --tag "$registry/stasis-kube:$version" --out "$out/stasis-kube" \
	--entrypoint /usr/bin/stasis-kube --user 65532 "$kube"

node=$work/node
mkdir -p "$node"
cp -a dist/deb/root/. "$node/"
install -D -m 0755 "$work/stasis-kube" "$node/usr/bin/stasis-kube"
mkdir -p "$node/usr/local/lib/stasis/cni/bin"
cp -a "$cni"/. "$node/usr/local/lib/stasis/cni/bin/"
# Laid out merged, as Debian 12 lays out a system (/lib a link to usr/lib):
# the demo's and other templates' sandboxes see the image's /usr alone, and
# a dynamic binary there needs its loader under it.
dpkg-deb -x "$work"/debs/libc6_*.deb "$work/libc6"
for dir in lib lib64; do
	mkdir -p "$node/usr/$dir"
	cp -a "$work/libc6/$dir/." "$node/usr/$dir/"
	ln -s "usr/$dir" "$node/$dir"
done
cp -a "$work/libc6/usr/." "$node/usr/"
cp -a "$work/libc6/etc" "$node/"
certs "$node"
# What a container runtime fills in, and stasisd's folders.
mkdir -p "$node"/{proc,sys,dev,tmp,run/stasis,var/lib/stasis,etc/cni/net.d}
chmod 1777 "$node/tmp"
go run ./cmd/internal/ociimage build --tag "$registry/stasis-node:$version" --out "$out/stasis-node" \
	--entrypoint /usr/bin/stasisd "$node"
