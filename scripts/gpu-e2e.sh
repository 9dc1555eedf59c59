#!/usr/bin/env bash
# GPU end-to-end checks and benchmarks. Run on a machine with an NVIDIA GPU,
# its driver and PyTorch, from the repository root, after building what it
# needs on a build machine:
#   scripts/build-gpu-bundle.sh          (here: builds into .gpu-bundle/)
#   scripts/gpu-e2e.sh [cuda] [OUTDIR]   (there)
# Writes JSON results and tables into OUTDIR (default ./gpu-results).
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-cuda}"
out="${2:-${OUT:-gpu-results}}"
mkdir -p "$out"
bundle=.gpu-bundle
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

{
	echo "date: $(date -u +%FT%TZ)"
	echo "commit: $(cat "$bundle/COMMIT" 2>/dev/null || echo unknown)"
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
	uname -r
} | tee "$out/machine.txt"

case "$what" in
cuda)
	python3 scripts/gpu/cuda_e2e.py --helper "$bundle/stasis-cuda" --out "$out" ${SIZES:+--sizes "$SIZES"} ${REPS:+--reps "$REPS"} 2>&1 | tee "$out/cuda-e2e.log"
	;;
*)
	echo "unknown suite $what: want cuda" >&2
	exit 2
	;;
esac
