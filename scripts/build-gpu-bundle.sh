#!/usr/bin/env bash
# Builds what scripts/gpu-e2e.sh runs on a GPU machine into .gpu-bundle/
# (ignored by git; carry it there): stasis-cuda, the stasis CLI and stasisd
# (with cgo, for NVML), the engine's GPU test binary and the pinned runsc,
# gzipped. STASIS_BUNDLE_XZ=1 recompresses them with xz -9 (3 minutes more on 2 cores;
# the engine test, runsc, stasis and versitygw then carry in 45 MB rather
# than 71 MB, under the GPU machine's 64 MiB: the anywhere suite over S3).
# "scripts/build-gpu-bundle.sh serve" builds only what scripts/gpu-e2e.sh serve
# runs: stasis, stasisd, stasis-cuda, runsc and the CNI plugins.
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=.gpu-bundle
mkdir -p "$bundle"
# An .xz of an earlier build would be unpacked before the new .gz.
rm -f "$bundle"/*.xz
git rev-parse HEAD >"$bundle/COMMIT" 2>/dev/null || echo uncommitted >"$bundle/COMMIT"
git diff --quiet 2>/dev/null || echo "+ uncommitted changes" >>"$bundle/COMMIT"
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$bundle/stasis-cuda" ./cmd/stasis-cuda
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$bundle/benchplot" ./cmd/internal/benchplot
source scripts/lib/cgo-env.sh
for cmd in stasis stasisd; do
	go build -trimpath -ldflags="-s -w" -o "$bundle/$cmd" "./cmd/$cmd"
	gzip -f "$bundle/$cmd"
done
# The CNI plugins of Stasis's own network, for actors with published ports.
scripts/install-cni.sh >/dev/null
for p in bridge host-local; do
	gzip -c "/usr/local/lib/stasis/cni/bin/$p" >"$bundle/$p.gz"
done
if [ "${1:-}" = serve ]; then
	rm -f "$bundle"/{engine-gpu.test,fsutil.test,pullbench.test,versitygw,benchplot}.gz "$bundle/benchplot"
	scripts/install-runsc.sh >/dev/null
	gzip -c "$(command -v runsc)" >"$bundle/runsc.gz"
fi
if [ "${1:-}" != serve ]; then
go test -c -tags gpu -trimpath -ldflags="-s -w" -o "$bundle/engine-gpu.test" ./engine
gzip -f "$bundle/engine-gpu.test"
CGO_ENABLED=0 go test -c -trimpath -ldflags="-s -w" -o "$bundle/fsutil.test" ./internal/fsutil
gzip -f "$bundle/fsutil.test"
CGO_ENABLED=0 go test -c -tags pullbench -trimpath -ldflags="-s -w" -o "$bundle/pullbench.test" ./store/archiver
gzip -f "$bundle/pullbench.test"
# versitygw, for the S3 figures of the anywhere suite.
scripts/install-versitygw.sh >/dev/null
gzip -c "$(command -v versitygw)" >"$bundle/versitygw.gz"
scripts/install-runsc.sh >/dev/null
gzip -c "$(command -v runsc)" >"$bundle/runsc.gz"
fi
if [ "${STASIS_BUNDLE_XZ:-}" = 1 ]; then
	for gz in "$bundle"/*.gz; do
		gunzip -c "$gz" | xz -9 -T0 >"${gz%.gz}.xz" && rm "$gz"
	done
fi
ls -la "$bundle"
