#!/usr/bin/env bash
# The anywhere benchmark's S3 figures alone (engine TestGPUAnywhere with
# STASIS_ANYWHERE_S3, plain mode by default), for a bundle that carries only
# engine-gpu.test.gz, runsc.gz, versitygw.gz and stasis-cuda: sandbox memory
# in huge pages as stasisd sets them (shmem_enabled advise, defrag defer),
# put back after.   scripts/gpu/anywhere-s3.sh OUTDIR
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(realpath -m "$1")
bundle="$PWD/.gpu-bundle" bin="$PWD/.gpu-work/bin"
mkdir -p "$out" "$bin"
for name in engine-gpu.test runsc versitygw; do gunzip -c "$bundle/$name.gz" >"$bin/$name" && chmod +x "$bin/$name"; done
export PATH="$bin:$PATH" TMPDIR="$PWD/.gpu-work"
thp=/sys/kernel/mm/transparent_hugepage
shmem=$(sed 's/.*\[\(.*\)\].*/\1/' "$thp/shmem_enabled") defrag=$(sed 's/.*\[\(.*\)\].*/\1/' "$thp/defrag")
trap 'echo "$shmem" >'"$thp"'/shmem_enabled; echo "$defrag" >'"$thp"'/defrag' EXIT
echo advise >"$thp/shmem_enabled" && echo defer >"$thp/defrag"
export STASIS_HELPER="$bundle/stasis-cuda" STASIS_SCRIPTS="$PWD/scripts/gpu" STASIS_GPU_OUT="$out" STASIS_WORK="$PWD/.gpu-work"
STASIS_ANYWHERE_S3=1 STASIS_ANYWHERE_MODES="${STASIS_ANYWHERE_MODES:-plain}" \
	"$bin/engine-gpu.test" -test.v -test.timeout 9m -test.run TestGPUAnywhere 2>&1 | tee "$out/engine-gpu.log"
