#!/usr/bin/env bash
# The project's test command (README, CI): installs what the tests need at
# pinned versions, then vets, lints and runs every test. Integration tests
# run real runsc sandboxes (systrap platform) and QEMU micro-VMs, and so need
# root.
set -euo pipefail
cd "$(dirname "$0")/.."

STATICCHECK_VERSION=v0.8.2

if [[ $(id -u) -ne 0 ]]; then
	echo "scripts/test.sh: the integration tests run runsc sandboxes and need root (run with sudo)" >&2
	exit 1
fi
command -v go >/dev/null || { echo "scripts/test.sh: Go 1.26 or newer is needed" >&2; exit 1; }
# The C compiler also builds the stand-in libcuda of the CUDA binding's tests.
source scripts/lib/cgo-env.sh
scripts/install-runsc.sh
scripts/install-runsc.sh --reference
scripts/install-versitygw.sh
scripts/install-fake-gcs.sh
scripts/install-microvm.sh
scripts/install-kube.sh
scripts/install-buf.sh
scripts/install-cni.sh
scripts/install-python-client.sh
scripts/install-prometheus.sh
scripts/install-helm.sh

echo "== gofmt"
unformatted=$(gofmt -l .)
[[ -z "$unformatted" ]] || { echo "not gofmt'ed: $unformatted" >&2; exit 1; }
echo "== buf lint, buf breaking, api/gen and the Python client current"
scripts/gen-api.sh --check
echo "== helm lint, deploy/kube what the chart renders"
scripts/gen-kube.sh --check
echo "== promtool: the alert rules checked and unit-tested"
promtool check rules deploy/prometheus/stasis-alerts.yaml
promtool test rules deploy/prometheus/stasis-alerts_test.yaml
echo "== go vet"
go vet ./...
echo "== staticcheck $STATICCHECK_VERSION"
go run "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION" ./...
echo "== go test"
# The integration and engine tests drive many real sandboxes; on a 2-core machine
# they take minutes, so the default 10-minute limit per package is raised.
go test -count=1 -timeout 45m "$@" ./...
# The runtime, engine, service and integration tests again on the reference runsc (May
# 2026, without --cuda-checkpoint-path), which Stasis still supports.
reference=/usr/local/lib/stasis/runsc-reference/bin
echo "== go test on the reference runsc $(cat /usr/local/lib/stasis/runsc-reference/share/stasis/runsc.version)"
PATH="$reference:$PATH" go test -count=1 -timeout 45m "$@" ./runtime/gvisor ./engine ./service ./integration
# The Debian package: built, installed with dpkg, its unit's command line
# serving the API and a demo actor through the packaged runsc.
echo "== the Debian package"
scripts/check-deb.sh
# The Helm chart's images: built, and run as the chart runs them (the node
# pod's stasisd serving a demo actor through the image's runsc).
echo "== the images"
scripts/check-images.sh
