#!/usr/bin/env bash
# Builds the standard CNI plugins that Stasis's own network uses (bridge,
# host-local) and the common ones an operator's network may name
# (loopback, portmap, firewall), from github.com/containernetworking/plugins
# at a pinned version, into $PREFIX/lib/stasis/cni/bin (default /usr/local),
# one of the folders stasisd looks in (--cni-bin-dir). Idempotent.
set -euo pipefail
source "$(dirname "$0")/lib/go-install-pinned.sh"
version="${CNI_PLUGINS_VERSION:-v1.10.0}"
for p in main/bridge ipam/host-local main/loopback meta/portmap meta/firewall; do
	PREFIX="${PREFIX:-/usr/local}/lib/stasis/cni" \
		go_install_pinned "$(basename "$p")" "github.com/containernetworking/plugins/plugins/$p" "$version" "under a minute on 2 cores"
done
