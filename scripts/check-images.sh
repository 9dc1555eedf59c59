#!/usr/bin/env bash
# The images' check (run by scripts/test.sh): builds them
# (scripts/build-images.sh), unpacks each, and runs them as the Helm chart's
# pods would be run, without a container engine: stasis-kube's binary
# answers; the node image's stasisd is started with the command and
# arguments the chart renders for its node pod (a folder store and the
# host folders in a temporary folder, the rest the chart's defaults), in
# the unpacked image's root (pivot_root in a private mount namespace, as a
# container runtime: ociimage run) on the host's network and PID namespace
# with /proc, /sys and /dev and the pod's host folders; its metrics port
# answers, and the image's stasis runs the demo (an actor suspended and
# resumed, its state kept) through the socket, in a sandbox of the image's
# runsc. stasisd is then stopped
# with SIGTERM, as the kubelet stops it, and must exit cleanly. Needs root
# and helm (scripts/install-helm.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/stasisd-check.sh
CHECK=check-images
[[ $(id -u) -eq 0 ]] || { echo "scripts/check-images.sh: chroot and mounts need root (run with sudo)" >&2; exit 1; }
scripts/build-images.sh
work=$(mktemp -d)
daemon=
cleanup() {
	# On a failure: stasisd, and any sandbox of its runsc state folder.
	if [[ -n "$daemon" ]] && kill -0 "$daemon" 2>/dev/null; then
		kill -KILL "$daemon"
		pkill -KILL -f -- "$work/data/runsc" || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

echo "== stasis-kube image"
go run ./cmd/internal/ociimage unpack dist/images/stasis-kube "$work/kube"
chroot --userspec 65532:65532 "$work/kube/rootfs" /usr/bin/stasis-kube --help | sed -n 1p
[[ -s "$work/kube/rootfs/etc/ssl/certs/ca-certificates.crt" ]] || { echo "check-images: stasis-kube has no CA certificates" >&2; exit 1; }

echo "== stasis-node image, run as the chart's node pod"
go run ./cmd/internal/ociimage unpack dist/images/stasis-node "$work/node"
go build -o "$work/ociimage" ./cmd/internal/ociimage
root=$work/node/rootfs
# The pod's host folders (the chart's values, here in the temporary folder).
data=$work/data run=$work/run port=19464
mkdir -p "$data/shared-store" "$run"
# The chart's stasisd container: its command and arguments, $(NODE_IP)
# the host's address (here loopback, as the pod is on the host's network).
helm template stasis deploy/helm/stasis --namespace stasis-system --show-only templates/node.yaml \
	--set stasisd.dataDir="$data" --set stasisd.socketDir="$run" --set stasisd.runscStateDir="$data/runsc" \
	--set store.location="$data/shared-store" --set metrics.port=$port >"$work/node.yaml"
sed -n '/^      - name: stasisd$/,/^        env:$/p' "$work/node.yaml" | sed -n 's/^        - \(--.*\)$/\1/p' |
	sed 's/\$(NODE_IP)/127.0.0.1/' >"$work/args"
grep -q "^--repo=$data/shared-store\$" "$work/args" || { echo "check-images: no stasisd arguments in the chart's rendering:" >&2; cat "$work/args" >&2; exit 1; }
command=$(sed -n '/^      - name: stasisd$/,/^        args:$/s/^        command: \[\(.*\)\]$/\1/p' "$work/node.yaml")
[[ "$command" == /usr/bin/stasisd ]] || { echo "check-images: the chart runs stasisd as '$command'" >&2; exit 1; }
mapfile -t args <"$work/args"
echo "stasisd ${args[*]}"

# A command in the pod's stasisd container (as kubectl exec runs one).
in_pod() { "$work/ociimage" run --bind "$data" --bind "$run" "$root" "$@"; }
stasis() { in_pod /usr/bin/stasis "$@"; }
stasis store init --repo "$data/shared-store"
log=$work/stasisd.log
"$work/ociimage" run --bind "$data" --bind "$run" "$root" "$command" "${args[@]}" 2>"$log" &
daemon=$!
socket=$run/stasisd.sock
stasisd_serving "$daemon" "$log" "$socket"
# The readiness probe's request (bash's own TCP, no curl needed).
health=$(exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3 && cat <&3) || true
[[ "$health" == "HTTP/1.0 200 OK"* ]] || { echo "check-images: the metrics port $port does not answer /healthz: $health" >&2; exit 1; }
echo "healthz: ${health##*$'\r\n\r\n'}"
demo_keeps_state "$log" "$work/demo.json" --socket "$socket" --data "$data"
stasisd_stops "$daemon" "$log"
daemon=
echo "== the images run as the chart runs them"
