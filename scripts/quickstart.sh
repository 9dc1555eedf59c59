#!/usr/bin/env bash
# The quick start's main job: installs runsc (pinned) and gcc if missing,
# builds stasis, stasisd and stasis-cuda into bin/, starts stasisd on its
# embedded defaults (data in /var/lib/stasis, API on /run/stasis/stasisd.sock,
# snapshots stored in /var/lib/stasis/store) unless one is already serving,
# and walks a demo actor through run, suspend and resume through it. With an
# NVIDIA GPU and PyTorch on the machine, a GPU demo actor follows. stasisd
# keeps running afterwards; its log is /var/lib/stasis/stasisd.log. Needs
# root and Go 1.26+; about 4 minutes on 2 cores the first time (runsc and
# stasis are built from source), seconds afterwards. Arguments go to `stasis demo` (for example --json);
# STASISD_FLAGS adds stasisd flags (for example --nvproxy-driver-version).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) -ne 0 ]]; then
	echo "scripts/quickstart.sh: runsc sandboxes need root (run with sudo)" >&2
	exit 1
fi
scripts/install-runsc.sh >&2
source scripts/lib/cgo-env.sh
mkdir -p bin
go build -o bin/stasis ./cmd/stasis
go build -o bin/stasisd ./cmd/stasisd
CGO_ENABLED=0 go build -o bin/stasis-cuda ./cmd/stasis-cuda

socket=/run/stasis/stasisd.sock
data=/var/lib/stasis
if ! bin/stasis actor ps --socket "$socket" >/dev/null 2>&1; then
	mkdir -p "$data"
	# stasisd finds bin/stasis-cuda next to itself for GPU actors.
	# shellcheck disable=SC2086
	nohup bin/stasisd --data "$data" --socket "$socket" --log-file "$data/stasisd.log" ${STASISD_FLAGS:-} >/dev/null 2>>"$data/stasisd.log" &
	echo "started stasisd (pid $!, log $data/stasisd.log; stop it with: kill $!)"
	for _ in $(seq 100); do
		bin/stasis actor ps --socket "$socket" >/dev/null 2>&1 && break
		kill -0 $! 2>/dev/null || { echo "stasisd did not start:" >&2; tail -5 "$data/stasisd.log" >&2; exit 1; }
		sleep 0.1
	done
fi
bin/stasis demo "$@"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && python3 -c 'import torch' 2>/dev/null; then
	bin/stasis demo --gpu "$@"
fi
