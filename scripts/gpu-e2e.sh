#!/usr/bin/env bash
# GPU end-to-end checks and benchmarks. Run on a machine with an NVIDIA GPU,
# its driver and PyTorch, from the repository root, after building what it
# needs on a build machine (Go and runsc are not needed there):
#   scripts/build-gpu-bundle.sh                    (here: builds into .gpu-bundle/)
#   scripts/gpu-e2e.sh cuda|cuda-overhead|engine|node|all [OUTDIR]   (there, as root)
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

bin="$PWD/.gpu-work/bin"
unpack() {
	mkdir -p "$bin"
	for name in "$@"; do
		gunzip -c "$bundle/$name.gz" >"$bin/$name" && chmod +x "$bin/$name"
	done
	export PATH="$bin:$PATH"
}

# The stasis CLI's view of this node: fingerprint, labels, memory advice.
run_node() {
	unpack runsc stasis
	local flags=(--runsc-root "$PWD/.gpu-work/runsc-root" --nvproxy-driver-version "${STASIS_NVPROXY_ABI:-580.126.20}")
	stasis node info "${flags[@]}" | tee "$out/node-info.txt"
	stasis node info --json "${flags[@]}" >"$out/node-info.json"
	stasis node labels "${flags[@]}" | tee "$out/node-labels.txt"
	stasis plan template --gpus 1 --actor-memory 8GiB "${flags[@]}" | tee "$out/plan-template.txt"
}

run_engine() {
	unpack runsc engine-gpu.test
	export STASIS_HELPER="$bundle/stasis-cuda" STASIS_SCRIPTS="$PWD/scripts/gpu" STASIS_GPU_OUT="$out" STASIS_WORK="$PWD/.gpu-work"
	export STASIS_NVPROXY_ABI="${STASIS_NVPROXY_ABI:-580.126.20}"
	"$bin/engine-gpu.test" -test.v -test.timeout "${ENGINE_TIMEOUT:-9m}" -test.run "${ENGINE_RUN:-TestGPUActor|TestGPUBench}" 2>&1 | tee "$out/engine-gpu.log"
}

case "$what" in
cuda) run_cuda ;;
cuda-overhead) python3 scripts/gpu/cuda_e2e.py --helper "$bundle/stasis-cuda" --out "$out" --overhead 2>&1 | tee "$out/cuda-overhead.log" ;;
engine) run_engine ;;
node) run_node ;;
all) run_node; run_engine; run_cuda ;;
*) echo "unknown suite $what: want cuda, cuda-overhead, engine, node or all" >&2; exit 2 ;;
esac
