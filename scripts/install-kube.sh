#!/usr/bin/env bash
# Installs the Kubernetes control plane the kube tests start on loopback:
# kube-apiserver, built from the Go module proxy at a pinned version
# (k8s.io/kubernetes, with each staging module it points at ./staging
# replaced by that module's tagged release), and etcd from Debian's
# etcd-server package at a pinned version. Installs into
# $PREFIX/lib/stasis/kube/bin (default /usr/local). Idempotent: the build is
# stamped with its version, as runsc's is; the first build takes about 10
# minutes on 2 cores.
set -euo pipefail
KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-3.4.23-4+b4}"
prefix="${PREFIX:-/usr/local}"
bin="$prefix/lib/stasis/kube/bin"
stamp="$prefix/share/stasis/kube.version"
want="kube-apiserver $KUBE_VERSION, etcd $ETCD_VERSION"

if [[ -x "$bin/kube-apiserver" && -x "$bin/etcd" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
	echo "$want already installed in $bin"
	exit 0
fi
command -v go >/dev/null || { echo "install-kube: go is needed to build kube-apiserver" >&2; exit 1; }
mkdir -p "$bin" "$(dirname "$stamp")"

if [[ "$(dpkg-query -W -f='${Version}' etcd-server 2>/dev/null || true)" != "$ETCD_VERSION" ]]; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "etcd-server=$ETCD_VERSION" >/dev/null || {
		echo "install-kube: apt-get install etcd-server=$ETCD_VERSION failed; if Debian has dropped it, bump ETCD_VERSION at the top of this script" >&2
		exit 1
	}
	# The package starts a system etcd on the default ports; the tests run
	# their own on other ports, so the system one is stopped and disabled.
	if command -v systemctl >/dev/null && systemctl is-system-running >/dev/null 2>&1; then
		systemctl disable --now etcd >/dev/null 2>&1 || true
	fi
	pkill -x etcd 2>/dev/null || true
fi
install -m 0755 "$(command -v etcd || echo /usr/bin/etcd)" "$bin/etcd"

if [[ ! -x "$bin/kube-apiserver" || "$("$bin/kube-apiserver" --version 2>/dev/null)" != "Kubernetes $KUBE_VERSION" ]]; then
	work="$(mktemp -d)"
	trap 'rm -rf "$work"' EXIT
	echo "building kube-apiserver $KUBE_VERSION (about 10 minutes on 2 cores)"
	staging="v0.${KUBE_VERSION#v1.}"
	gomod="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')"
	{
		echo "module stasis.dev/kube-build"
		echo "go 1.26"
		echo "require k8s.io/kubernetes $KUBE_VERSION"
		sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9.-]*\) => \./staging/.*#replace \1 => \1 '"$staging"'#p' "$gomod"
	} >"$work/go.mod"
	grep -c '^replace' "$work/go.mod" | xargs echo "staging modules replaced:"
	(
		cd "$work"
		printf 'package main\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver"\n' >tools.go
		GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || GOFLAGS=-mod=mod go get "k8s.io/kubernetes/cmd/kube-apiserver@$KUBE_VERSION"
		# The version the binary reports is set the way Kubernetes' own build does.
		ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2)"
		CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags="$ldflags" -o "$bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
	)
fi
echo "$want" >"$stamp"
echo "installed $want in $bin"
