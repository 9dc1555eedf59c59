#!/usr/bin/env bash
# GPU end-to-end checks and benchmarks. Run on a machine with an NVIDIA GPU,
# its driver and PyTorch, from the repository root, after building what it
# needs on a build machine (Go and runsc are not needed there):
#   scripts/build-gpu-bundle.sh                    (here: builds into .gpu-bundle/)
#   scripts/gpu-e2e.sh cuda|cuda-overhead|engine|node|service|synthetic|server|store|gvisor|paths|zero-pages|resume|server-resume|serve|writeback|anywhere|push|benchmarks|all [OUTDIR]   (there, as root)
# Results (JSON, tables, logs) go to OUTDIR (default ./gpu-results).
# Knobs: SIZES, REPS, CUDA_SKIP_E2E (cuda); STASIS_GPU_GIB, ENGINE_RUN,
# ENGINE_TIMEOUT, ENGINE_TEST (engine); STASIS_BENCH_GIB, STASIS_BENCH_STORE_MAX_GB
# (synthetic);
# STASIS_NVPROXY_ABI, the driver ABI runsc uses when it does not know the
# host's driver: the default runsc (September 2026) knows 580.159.04 and
# needs none; with the May build set it to 580.126.20 (see FACTS).
# STASIS_GPU_PATHS and STASIS_PATH_GIB (paths); STASIS_ZERO_GIB (zero-pages);
# STASIS_RESUME_GIB, STASIS_RESUME_VARIANTS, STASIS_RESUME_COLD,
# STASIS_RESUME_DEFAULT, STASIS_RESUME_THP, STASIS_RUNSC_DEBUG (runsc's debug logs:
# their memory loading and restore timelines, also for anywhere) and, with it,
# STASIS_RESUME_STRACE (the kept resume's system calls, strace-summary.md) (resume);
# STASIS_SERVER_MODES, STASIS_SERVER_RESUMES (kept,warm,cold) and
# STASIS_RESUME_THP (server-resume);
# STASIS_WRITEBACK_GIB and STASIS_WRITEBACK_RUNS (writeback);
# STASIS_ANYWHERE_MODES (plain,compiled; none: the pull benchmark alone), STASIS_ANYWHERE_SECOND (a second
# actor of the template) and STASIS_ANYWHERE_WHOLE (the pull whole before the
# restore too, beside the default through a view) and STASIS_ANYWHERE_UNSTAGED
# (the image written into the folder as it arrives too, beside the default held
# in memory during the resume), each 1 for every mode or a list of modes, STASIS_ANYWHERE_DIRTY_GIB (N: vm.dirty_background_bytes N GiB
# and vm.dirty_bytes 2N during the test, so that the pulled copy is not
# written back while the pull reads), STASIS_ANYWHERE_PROFILE=1 (a CPU
# profile of the test process over each remote resume, anywhere-*.pprof),
# STASIS_ANYWHERE_TRACE=1 (each remote resume's pull traced piece by piece,
# anywhere-*.trace.jsonl.gz: archiver.Trace), STASIS_ANYWHERE_READAHEAD (a list
# of MiB, -1 for none: the remote resume again with that archiver read-ahead),
# STASIS_ANYWHERE_DOWNLOADS (a
# list: the remote resume again with that many stretches read at once),
# STASIS_ANYWHERE_STACKS=1 (where a remote resume's restore step waits when it
# has not returned after 1 s and 2.5 s, anywhere-*.stacks.txt),
# STASIS_ANYWHERE_ELSEWHERE=DIR (the suspend also pushed into a store in DIR,
# off the image's disk, e.g. /dev/shm/x), STASIS_ANYWHERE_WARM_RUNTIME (the
# remote resume again with runsc's binary read into the page cache after the
# drop), STASIS_ANYWHERE_WARM_ROOTFS (again with the metadata of the actor's
# root file system read after the drop), STASIS_ANYWHERE_NO_PREFETCH (again
# without Engine.Prefetch), STASIS_ANYWHERE_GUIDED
# (the engine's own first reads: the remote resume suspended and pushed,
# that snapshot resumed remotely, beside the first one's), STASIS_ANYWHERE_S3, STASIS_PULL_GIB, STASIS_PULL_RUNS, STASIS_PULL_WRITEBACK and
# STASIS_PULL_DOWNLOADS (anywhere; lists take turns run by run).
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
# unpack NAME... takes each from the bundle, as NAME.gz or, smaller to carry
# (xz -9: runsc 15 MB against 26 MB gzipped), NAME.xz, which Python's lzma
# reads where no xz is installed.
unpack() {
	mkdir -p "$bin"
	for name in "$@"; do
		if [ ! -f "$bundle/$name.xz" ] && [ ! -f "$bundle/$name.gz" ]; then
			echo "gpu-e2e: $name is not in $bundle (scripts/build-gpu-bundle.sh builds it)" >&2
			return 1
		elif [ -f "$bundle/$name.xz" ]; then
			python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$bundle/$name.xz" "$bin/$name"
		else
			gunzip -c "$bundle/$name.gz" >"$bin/$name"
		fi
		chmod +x "$bin/$name"
	done
	export PATH="$bin:$PATH"
}

# The stasis CLI's view of this node: fingerprint, labels, memory advice.
run_node() {
	unpack runsc stasis
	local flags=(--runsc-root "$PWD/.gpu-work/runsc-root" ${STASIS_NVPROXY_ABI:+--nvproxy-driver-version "$STASIS_NVPROXY_ABI"})
	stasis node info "${flags[@]}" | tee "$out/node-info.txt"
	stasis node info --json "${flags[@]}" >"$out/node-info.json"
	stasis node labels "${flags[@]}" | tee "$out/node-labels.txt"
	stasis plan template --gpus 1 --actor-memory 8GiB "${flags[@]}" | tee "$out/plan-template.txt"
}

# stasisd driven by the stasis CLI: the GPU quick-start demo (whose template,
# a PyTorch actor holding STASIS_GPU_GIB (8) of device memory, the rest
# reuses), then an actor of it through run, pause, resume, suspend, resume
# and rm with its device data verified after each resume, then the template
# warmed and two actors started from its golden snapshot.
run_service() {
	unpack runsc stasis stasisd
	cp "$bundle/stasis-cuda" "$bin/stasis-cuda"
	local data="$PWD/.gpu-work/service" gib="${STASIS_GPU_GIB:-8}"
	local socket="$data/stasisd.sock"
	rm -rf "$data" && mkdir -p "$data"
	stasisd --data "$data" --socket "$socket" --network none --log-format text \
		${STASIS_NVPROXY_ABI:+--nvproxy-driver-version "$STASIS_NVPROXY_ABI"} >"$out/stasisd.log" 2>&1 &
	local daemon=$!
	trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null' RETURN
	for _ in $(seq 200); do stasis actor ps --socket "$socket" >/dev/null 2>&1 && break; sleep 0.1; done
	local s=(--socket "$socket" --data "$data")
	step() { # NAME COMMAND...: runs and times one CLI command, output kept; a failure is recorded, not fatal
		local name=$1 start rc=0
		shift
		start=$EPOCHREALTIME
		"$@" >"$out/service-$name.out" 2>"$out/service-$name.err" || rc=$?
		printf '%-22s rc=%d %7.2fs  %s\n' "$name" "$rc" "$(awk "BEGIN{print $EPOCHREALTIME - $start}")" "$(head -c 160 "$out/service-$name.out" | tr '\n' ' ')" | tee -a "$out/service-steps.txt"
	}
	verify() { step "$1" stasis actor exec "$2" "${s[@]}" -- "$(command -v python3)" /stasis-scripts/holder_client.py verify; }
	apps() { nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ' '; }
	step demo-gpu stasis demo --gpu --gpu-gib "$gib" --gpu-scripts scripts/gpu --json "${s[@]}"
	step run stasis actor run stasis-demo-gpu --id gpu1 --cold --json "${s[@]}"
	step info stasis actor exec gpu1 "${s[@]}" -- "$(command -v python3)" /stasis-scripts/holder_client.py info
	verify verify-run gpu1
	step pause stasis actor pause gpu1 --json "${s[@]}"
	echo "compute apps while paused: [$(apps)]" | tee -a "$out/service-steps.txt"
	step resume-1 stasis actor resume gpu1 --json "${s[@]}"
	verify verify-resume-1 gpu1
	step suspend stasis actor suspend gpu1 --json "${s[@]}"
	echo "compute apps while suspended: [$(apps)]" | tee -a "$out/service-steps.txt"
	step resume-2 stasis actor resume gpu1 --json "${s[@]}"
	verify verify-resume-2 gpu1
	step info-after stasis actor exec gpu1 "${s[@]}" -- "$(command -v python3)" /stasis-scripts/holder_client.py info
	step events stasis actor events gpu1 --json "${s[@]}"
	step rm stasis actor rm gpu1 --purge "${s[@]}"
	step warm stasis template warm stasis-demo-gpu --json "${s[@]}"
	step golden-1 stasis actor run stasis-demo-gpu --id g1 --json "${s[@]}"
	step golden-2 stasis actor run stasis-demo-gpu --id g2 --json "${s[@]}"
	step info-g1 stasis actor exec g1 "${s[@]}" -- "$(command -v python3)" /stasis-scripts/holder_client.py info
	step info-g2 stasis actor exec g2 "${s[@]}" -- "$(command -v python3)" /stasis-scripts/holder_client.py info
	verify verify-g1 g1
	verify verify-g2 g2
	echo "compute apps with g1 and g2: [$(apps)]" | tee -a "$out/service-steps.txt"
	# The fleet lease: lapsed, it freezes the GPU actors where they stand;
	# renewed, binding g1 here, it thaws g1 with its device data, g2 stays.
	lease() { curl -s --unix-socket "$socket" -H 'Content-Type: application/json' -d "$1" "http://stasisd/stasis.v1.Stasis/$2"; }
	state() { stasis actor inspect "$1" --json "${s[@]}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])'; }
	await_state() { for _ in $(seq 100); do [ "$(state "$1")" = "$2" ] && return 0; sleep 0.1; done; return 1; }
	step lease-lapse lease '{"holder":"gpu-e2e","validForSeconds":0.5,"bound":["g1","g2"]}' RenewLease
	step fenced await_state g1 FENCED
	step fenced-g2 await_state g2 FENCED
	echo "compute apps while fenced: [$(apps)]" | tee -a "$out/service-steps.txt"
	step lease-renew lease '{"holder":"gpu-e2e","validForSeconds":600,"bound":["g1"]}' RenewLease
	step thawed await_state g1 RUNNING
	verify verify-thawed g1
	step still-fenced await_state g2 FENCED
	step lease-release lease '{}' ReleaseLease
	step ps stasis actor ps "${s[@]}"
	step rm-g1 stasis actor rm g1 "${s[@]}"
	step rm-g2 stasis actor rm g2 "${s[@]}"
	curl -s --unix-socket "$socket" http://stasisd/metrics | grep '^stasis_' >"$out/service-metrics.txt" || true
	golden_prestaged
}

# Golden snapshots pre-staged (#27 goal 5), after run_service's warm: a
# second stasisd ("node B": its own data folder, node A's store folder as
# its store) starts an actor from A's stored golden snapshot without it
# (pulled), then stages it (stasis snapshot stage) and starts another from
# the staged copy; A starts one from its own golden folder. The page cache
# is dropped before each start; every start's device data is verified.
# Times in golden-prestaged.json.
golden_prestaged() {
	local datab="$PWD/.gpu-work/service-b" socketb="$PWD/.gpu-work/service-b/stasisd.sock"
	rm -rf "$datab" && mkdir -p "$datab"
	stasisd --data "$datab" --socket "$socketb" --repo "$data/store" --host-path "$data/templates" --network none --log-format text \
		${STASIS_NVPROXY_ABI:+--nvproxy-driver-version "$STASIS_NVPROXY_ABI"} >"$out/stasisd-b.log" 2>&1 &
	local daemonb=$!
	for _ in $(seq 200); do stasis actor ps --socket "$socketb" >/dev/null 2>&1 && break; sleep 0.1; done
	local b=(--socket "$socketb" --data "$datab")
	local golden
	golden=$(stasis snapshot ls --json "${s[@]}" | python3 -c 'import json,sys; print([x["stored"] for x in json.load(sys.stdin) if x["kind"]=="golden"][0])')
	stasis template ls --json "${s[@]}" | python3 -c 'import json,sys
t=[x for x in json.load(sys.stdin) if x["name"]=="stasis-demo-gpu"][0]
for k in ("golden","createdAt"): t.pop(k,None)
print(json.dumps(t))' >"$out/template-b.json"
	step b-template curl -s --unix-socket "$socketb" -H 'Content-Type: application/json' -d @"$out/template-b.json" http://stasisd/stasis.v1.Stasis/CreateTemplate
	timed() { # NAME COMMAND...: seconds of one step, page cache dropped first
		sync && echo 3 >/proc/sys/vm/drop_caches
		local start=$EPOCHREALTIME
		step "$@"
		awk "BEGIN{print $EPOCHREALTIME - $start}"
	}
	local t_local t_pulled t_stage t_staged
	t_local=$(timed a-from-own-golden stasis actor run stasis-demo-gpu --id ga --json "${s[@]}" | tail -1)
	verify verify-ga ga
	step rm-ga stasis actor rm ga "${s[@]}"
	t_pulled=$(timed b-from-store stasis actor run stasis-demo-gpu --id gx --from-stored "$golden" --json "${b[@]}" | tail -1)
	bverify() { step "$1" stasis actor exec "$2" "${b[@]}" -- "$(command -v python3)" /stasis-scripts/holder_client.py verify; }
	bverify verify-gx gx
	step rm-gx stasis actor rm gx "${b[@]}"
	t_stage=$(timed b-stage stasis snapshot stage "$golden" --json "${b[@]}" | tail -1)
	step b-staged stasis snapshot staged "${b[@]}"
	t_staged=$(timed b-from-staged stasis actor run stasis-demo-gpu --id gb --json --from-stored "$golden" "${b[@]}" | tail -1)
	bverify verify-gb gb
	step b-events stasis actor events gb --json "${b[@]}"
	local pulled_steps
	pulled_steps=$(python3 -c 'import json,sys; print(sum(1 for e in json.load(open(sys.argv[1])) if e.get("step")=="pull"))' "$out/service-b-events.out")
	step rm-gb stasis actor rm gb "${b[@]}"
	kill $daemonb 2>/dev/null; wait $daemonb 2>/dev/null || true
	python3 -c 'import json,sys
local,pulled,stage,staged,pulls=map(float,sys.argv[2:7])
r={"golden":sys.argv[1],"own_golden_s":local,"from_store_s":pulled,"stage_s":stage,"from_staged_s":staged,"pull_steps_from_staged":int(pulls),"golden_prestaged_over_local":staged/local,"unstaged_over_local":pulled/local}
print(json.dumps(r,indent=1))' "$golden" "$t_local" "$t_pulled" "$t_stage" "$t_staged" "$pulled_steps" | tee "$out/golden-prestaged.json"
}

# The cold start against resume benchmark of a 6.7B-parameter server
# (engine/gpu_server_test.go); the weights are made once into
# STASIS_LLM_DIR (default .gpu-work/llm-7b, 13 GB). Writes the figures to
# engine-gpu.jsonl, the plot to cold-vs-resume.png and prints the table
# (also cold-vs-resume.md).
run_server() {
	ENGINE_RUN=TestGPUServerBench ENGINE_TIMEOUT="${ENGINE_TIMEOUT:-9m}" run_engine
	plot
}

# The synthetic actors of the same benchmark (TestGPUBench): STASIS_BENCH_GIB
# (default 1,8,32) GiB of device memory each, cold start to the first GPU
# operation, engine and raw suspend and resume, image and stored size.
run_synthetic() {
	ENGINE_RUN=TestGPUBench ENGINE_TIMEOUT="${ENGINE_TIMEOUT:-9m}" run_engine
	plot
}

# The store's dedup of two GPU actors of one template (TestGPUStoreDedup):
# STASIS_GPU_GIB (8) GiB each, saved into one local store.
run_store() {
	ENGINE_RUN=TestGPUStoreDedup ENGINE_TIMEOUT="${ENGINE_TIMEOUT:-9m}" run_engine
}

# The gVisor issue's checks on the runsc in use: the seed's failure (a
# checkpoint with a live CUDA context and no CUDA step, with and without
# --leave-running), a restore through runsc's own CUDA step with a device
# map (stasis-cuda applies it and says so in runsc's debug log), and that
# step on two CUDA processes, sequential against parallel.
run_gvisor() {
	ENGINE_RUN='TestGPUSeedFailure|TestGPURuntimePathDeviceMap|TestGPUCudaSequential' ENGINE_TIMEOUT="${ENGINE_TIMEOUT:-9m}" run_engine
}

# The two GPU paths (STASIS_GPU_PATHS, default exec,runtime) at
# STASIS_PATH_GIB (default 1,8): suspend and resume cycles with --direct off
# and on, resumes verified by size and by hashing while restoring.
run_paths() {
	ENGINE_RUN=TestGPUPaths ENGINE_TIMEOUT="${ENGINE_TIMEOUT:-9m}" run_engine
}

# Committed zero pages kept in the image against left out
# (TestGPUZeroPages): STASIS_ZERO_GIB (default 4) GiB of patterned and as
# much of zeroed device memory.
run_zero_pages() {
	ENGINE_RUN=TestGPUZeroPages run_engine
}

# The resume-speed benchmark (TestGPUResumeSpeed): per size in
# STASIS_RESUME_GIB (1,8), the driver's own restore in a plain process
# beside one snapshot resumed each way of STASIS_RESUME_VARIANTS (and, at
# 8 GiB, of STASIS_RESUME_COLD with the page cache dropped); then the table
# and resume-summary.json for STASIS_RESUME_DEFAULT (auto), the engine's
# default, of every result in OUTDIR.
run_resume() {
	thp_runs TestGPUResumeSpeed
	resume_summary
}

# The production-style server benchmark (TestGPUServerResume): the 7B server
# of run_server in each mode of STASIS_SERVER_MODES (compiled,plain), cold
# start against resume to the first token kept in memory, warm and cold
# (STASIS_SERVER_RESUMES); then the summary.
# Serve: the 7B server as a stasisd actor with a published port, woken by
# the requests that come while it is paused, suspended or stored only
# (scripts/gpu/serve_bench.py; serve-summary.json). Built with
# scripts/build-gpu-bundle.sh serve.
run_serve() {
	unpack runsc stasis stasisd bridge host-local
	mkdir -p "$PWD/.gpu-work"
	python3 scripts/gpu/serve_bench.py --bin "$bin" --helper "$bundle/stasis-cuda" --scripts "$PWD/scripts/gpu" \
		--work "$PWD/.gpu-work" --out "$out" --commit "$(head -1 "$bundle/COMMIT" 2>/dev/null)" 2>&1 | tee "$out/serve.log"
}

run_server_resume() {
	thp_runs TestGPUServerResume
	resume_summary
}

# How fast a checkpoint's image is made durable on this machine's disk
# (BenchmarkWriteback): the ways of asking the disk to write while runsc
# writes, beside O_DIRECT.
run_writeback() {
	unpack fsutil.test
	mkdir -p "$PWD/.gpu-work"
	STASIS_WRITEBACK_GIB="${STASIS_WRITEBACK_GIB:-8}" STASIS_WRITEBACK_DIR="$PWD/.gpu-work" \
		"$bin/fsutil.test" -test.run '^$' -test.bench Writeback -test.benchtime "${STASIS_WRITEBACK_RUNS:-1}x" 2>&1 | tee "$out/writeback.txt"
}

# Resume anywhere: the pull benchmark (STASIS_PULL_GIB, default 16, beside
# the disk's cold read of the same bytes; skipped with 0), then
# TestGPUAnywhere (the 7B server resumed on a node that never held it;
# with STASIS_ANYWHERE_S3, versitygw from the bundle), then
# anywhere-summary.json from what this OUTDIR holds.
run_anywhere() {
	if [ -f "$bundle/versitygw.gz" ] || [ -f "$bundle/versitygw.xz" ]; then unpack versitygw; fi
	mkdir -p "$PWD/.gpu-work"
	export TMPDIR="$PWD/.gpu-work"
	if [ "${STASIS_PULL_GIB:-16}" != 0 ]; then
		unpack pullbench.test
		STASIS_PULL_GIB="${STASIS_PULL_GIB:-16}" STASIS_BENCH_DIR="$PWD/.gpu-work" STASIS_BENCH_OUT="$out" \
			"$bin/pullbench.test" -test.run TestPullBench -test.v -test.timeout 30m 2>&1 | tee "$out/pullbench.txt"
	fi
	if [ "${STASIS_ANYWHERE_MODES:-plain,compiled}" != none ]; then
		local vm=/proc/sys/vm saved="" f rc=0
		if [ -n "${STASIS_ANYWHERE_DIRTY_GIB:-}" ]; then
			# The kernel's write-back deferred while the pull reads (its
			# thresholds above the pulled copy's size), as an operator may set
			# them; the machine's put back after.
			for f in dirty_ratio dirty_bytes dirty_background_ratio dirty_background_bytes; do
				[ "$(cat "$vm/$f")" = 0 ] || saved+="$f=$(cat "$vm/$f") "
			done
			echo $((2 * STASIS_ANYWHERE_DIRTY_GIB << 30)) >"$vm/dirty_bytes"
			echo $((STASIS_ANYWHERE_DIRTY_GIB << 30)) >"$vm/dirty_background_bytes"
		fi
		if [ "${STASIS_ANYWHERE_PROFILE:-}" = 1 ]; then export STASIS_ANYWHERE_CPUPROFILE="$out"; fi
		if [ "${STASIS_ANYWHERE_TRACE:-}" = 1 ]; then export STASIS_ANYWHERE_TRACEDIR="$out"; fi
		# Sandbox memory in huge pages, as stasisd sets them at start.
		thp_runs TestGPUAnywhere || rc=$?
		for f in $saved; do echo "${f#*=}" >"$vm/${f%%=*}"; done
		[ "$rc" = 0 ] || return "$rc"
	fi
	python3 scripts/gpu/anywhere_summary.py "$out" "$(head -1 "$bundle/COMMIT" 2>/dev/null)" | tee "$out/anywhere-summary.md"
	if [ -f "$out/engine-gpu.jsonl" ]; then python3 scripts/gpu/anywhere_timeline.py "$out/engine-gpu.jsonl" | tee "$out/anywhere-timeline.md"; fi
}

# The push to S3 (versitygw on loopback) beside the push into a local
# folder, the S3 bodies checked by a CRC32C trailer and, in the same run,
# signed in pieces (STASIS_PUSH_GIB, default 8; STASIS_PUSH_RUNS, default 3).
run_push() {
	unpack pullbench.test versitygw
	mkdir -p "$PWD/.gpu-work"
	STASIS_PUSH_GIB="${STASIS_PUSH_GIB:-8}" STASIS_BENCH_DIR="$PWD/.gpu-work" \
		"$bin/pullbench.test" -test.run TestPushBench -test.v -test.timeout 30m 2>&1 | tee "$out/pushbench.txt"
}

resume_summary() {
	python3 scripts/gpu/resume_summary.py "$out" "${STASIS_RESUME_DEFAULT:-auto}" "$(head -1 "$bundle/COMMIT" 2>/dev/null)" "$thp_last" | tee "$out/resume-summary.md"
}

# thp_runs TEST runs the engine test once per transparent huge page setting
# of STASIS_RESUME_THP (default "stasis"): each "stasis" (as `stasis node
# tune`, which stasisd runs at start, sets them), "host" (as the machine has
# them) or SHMEM_ENABLED/DEFRAG written to /sys/kernel/mm/transparent_hugepage;
# the machine's own are put back at exit. STASIS_RUNSC_DEBUG=1 keeps runsc's
# debug logs and extracts their memory load lines into runsc-memory.log, and
# their restore timelines and loading lines into runsc-restore-TEST.log.gz.
thp_runs() {
	local thp=/sys/kernel/mm/transparent_hugepage mode
	# Global, as the EXIT trap that puts them back runs after this function.
	thp_shmem=$(sed 's/.*\[\(.*\)\].*/\1/' "$thp/shmem_enabled") thp_defrag=$(sed 's/.*\[\(.*\)\].*/\1/' "$thp/defrag")
	trap 'echo "$thp_shmem" >/sys/kernel/mm/transparent_hugepage/shmem_enabled; echo "$thp_defrag" >/sys/kernel/mm/transparent_hugepage/defrag' EXIT
	# Called where a failure does not stop the script (cmd || rc=$?): a
	# run without stasis would measure sandbox memory in 4 KiB pages.
	unpack stasis || return 1
	for mode in ${STASIS_RESUME_THP:-stasis}; do
		echo "$thp_shmem" >"$thp/shmem_enabled" && echo "$thp_defrag" >"$thp/defrag"
		case $mode in
		host) ;;
		stasis) stasis node tune | tee -a "$out/resume-thp.txt" || return 1 ;;
		*) echo "${mode%/*}" >"$thp/shmem_enabled" && echo "${mode#*/}" >"$thp/defrag" ;;
		esac
		mode=$(sed 's/.*\[\(.*\)\].*/\1/' "$thp/shmem_enabled")/$(sed 's/.*\[\(.*\)\].*/\1/' "$thp/defrag")
		echo "transparent huge pages for $1: shmem_enabled/defrag $mode" | tee -a "$out/resume-thp.txt"
		if [ -n "${STASIS_RUNSC_DEBUG:-}" ]; then
			export STASIS_RUNSC_DEBUG_DIR="$PWD/.gpu-work/runsc-debug"
			rm -rf "$STASIS_RUNSC_DEBUG_DIR" && mkdir -p "$STASIS_RUNSC_DEBUG_DIR"
		fi
		ENGINE_RUN=$1 ENGINE_TIMEOUT="${ENGINE_TIMEOUT:-9m}" run_engine
		if [ -n "${STASIS_RUNSC_DEBUG:-}" ]; then
			grep -h -E "huge pages|page loading|loaded metadata|restore took" "$STASIS_RUNSC_DEBUG_DIR"/* 2>/dev/null | cut -c1-400 | sed "s|^|$mode |" >>"$out/runsc-memory.log" || true
			python3 scripts/gpu/runsc_log_lines.py "$STASIS_RUNSC_DEBUG_DIR" "$out/runsc-restore-$1.log.gz" || true
			if [ -n "${STASIS_RESUME_STRACE:-}" ]; then
				python3 scripts/gpu/strace_summary.py "$STASIS_RUNSC_DEBUG_DIR" "$out" | tee "$out/strace-summary.md"
			fi
		fi
		thp_last=$mode
	done
}

# The table and plot of every benchmark result in OUTDIR so far.
plot() {
	"$bundle/benchplot" -o "$out/cold-vs-resume.png" "$out/engine-gpu.jsonl" | tee "$out/cold-vs-resume.md"
}

# ENGINE_TEST names the engine's test binary in the bundle (default
# engine-gpu.test; another build, such as an older commit's, for an A/B).
run_engine() {
	local test="${ENGINE_TEST:-engine-gpu.test}"
	unpack runsc "$test"
	export STASIS_HELPER="$bundle/stasis-cuda" STASIS_SCRIPTS="$PWD/scripts/gpu" STASIS_GPU_OUT="$out" STASIS_WORK="$PWD/.gpu-work"
	export STASIS_NVPROXY_ABI="${STASIS_NVPROXY_ABI:-}"
	"$bin/$test" -test.v -test.timeout "${ENGINE_TIMEOUT:-9m}" -test.run "${ENGINE_RUN:-TestGPUActor|TestGPUBench}" 2>&1 | tee "$out/engine-gpu.log"
}

case "$what" in
cuda) run_cuda ;;
cuda-overhead) python3 scripts/gpu/cuda_e2e.py --helper "$bundle/stasis-cuda" --out "$out" --overhead 2>&1 | tee "$out/cuda-overhead.log" ;;
engine) run_engine ;;
node) run_node ;;
service) run_service ;;
synthetic) run_synthetic ;;
store) run_store ;;
server) run_server ;;
gvisor) run_gvisor ;;
paths) run_paths ;;
zero-pages) run_zero_pages ;;
resume) run_resume ;;
server-resume) run_server_resume ;;
serve) run_serve ;;
writeback) run_writeback ;;
anywhere) run_anywhere ;;
push) run_push ;;
benchmarks) run_synthetic; run_server ;;
all) run_node; run_service; ENGINE_RUN="TestGPUActor|TestGPUCompatAndPlan" run_engine; run_synthetic; run_server; run_cuda ;;
*) echo "unknown suite $what: want cuda, cuda-overhead, engine, node, service, synthetic, server, store, gvisor, paths, zero-pages, resume, server-resume, writeback, anywhere, push, benchmarks or all" >&2; exit 2 ;;
esac
