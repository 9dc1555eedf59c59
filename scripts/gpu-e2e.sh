#!/usr/bin/env bash
# GPU end-to-end checks and benchmarks. Run on a machine with an NVIDIA GPU,
# its driver and PyTorch, from the repository root, after building what it
# needs on a build machine (Go and runsc are not needed there):
#   scripts/build-gpu-bundle.sh                    (here: builds into .gpu-bundle/)
#   scripts/gpu-e2e.sh cuda|cuda-overhead|engine|all [OUTDIR]   (there, as root)
# Results (JSON, tables, logs) go to OUTDIR (default ./gpu-results).
# Knobs: SIZES, REPS, CUDA_SKIP_E2E (cuda); STASIS_GPU_GIB, STASIS_BENCH_GIB,
# ENGINE_RUN, ENGINE_TIMEOUT (engine);
# STASIS_NVPROXY_ABI, the driver ABI runsc uses when it does not know the
# host's driver (default 580.126.20 for driver 580.159.04, see FACTS).
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
out="$(realpath -m "${2:-${OUT:-gpu-results}}")"
mkdir -p "$out"
bundle="$PWD/.gpu-bundle"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

{
	echo "date: $(date -u +%FT%TZ)"
	echo "commit: $(cat "$bundle/COMMIT" 2>/dev/null | tr '\n' ' ')"
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
	uname -r
} | tee "$out/machine.txt"

run_cuda() {
	python3 scripts/gpu/cuda_e2e.py --helper "$bundle/stasis-cuda" --out "$out" ${SIZES:+--sizes "$SIZES"} ${REPS:+--reps "$REPS"} ${CUDA_SKIP_E2E:+--skip-e2e} 2>&1 | tee "$out/cuda-e2e.log"
}

run_engine() {
	local bin="$PWD/.gpu-work/bin"
	mkdir -p "$bin"
	gunzip -c "$bundle/runsc.gz" >"$bin/runsc" && chmod +x "$bin/runsc"
	gunzip -c "$bundle/engine-gpu.test.gz" >"$bin/engine-gpu.test" && chmod +x "$bin/engine-gpu.test"
	export PATH="$bin:$PATH"
	export STASIS_HELPER="$bundle/stasis-cuda" STASIS_SCRIPTS="$PWD/scripts/gpu" STASIS_GPU_OUT="$out" STASIS_WORK="$PWD/.gpu-work"
	export STASIS_NVPROXY_ABI="${STASIS_NVPROXY_ABI:-580.126.20}"
	"$bin/engine-gpu.test" -test.v -test.timeout "${ENGINE_TIMEOUT:-9m}" -test.run "${ENGINE_RUN:-TestGPUActor|TestGPUBench}" 2>&1 | tee "$out/engine-gpu.log"
}

case "$what" in
cuda) run_cuda ;;
cuda-overhead) python3 scripts/gpu/cuda_e2e.py --helper "$bundle/stasis-cuda" --out "$out" --overhead 2>&1 | tee "$out/cuda-overhead.log" ;;
engine) run_engine ;;
all) run_engine; run_cuda ;;
*) echo "unknown suite $what: want cuda, cuda-overhead, engine or all" >&2; exit 2 ;;
esac
