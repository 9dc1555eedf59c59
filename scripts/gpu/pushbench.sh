#!/usr/bin/env bash
# The push benchmark (store/archiver TestPushBench, tag pullbench) on the
# GPU machine, two builds against each other run by run: a local store
# folder and S3 (versitygw on loopback). Carry DIR holding
# push-before.test.gz, push-after.test.gz and versitygw.gz (built here with
# go test -c -tags pullbench ./store/archiver).
#   scripts/gpu/pushbench.sh DIR OUTDIR   (STASIS_PUSH_GIB, STASIS_PUSH_RUNS)
set -euo pipefail
dir=$1 out=$2
mkdir -p "$out" "$dir/bin"
for f in "$dir"/*.gz; do gunzip -c "$f" >"$dir/bin/$(basename "$f" .gz)"; chmod +x "$dir/bin/$(basename "$f" .gz)"; done
export PATH="$dir/bin:$PATH" STASIS_BENCH_DIR="$dir"
for v in before after; do
	echo "== $v" | tee -a "$out/pushbench.md"
	STASIS_PUSH_GIB="${STASIS_PUSH_GIB:-4}" STASIS_PUSH_RUNS="${STASIS_PUSH_RUNS:-2}" "$dir/bin/push-$v.test" -test.run TestPushBench -test.timeout 20m 2>&1 | grep '^|' | tee -a "$out/pushbench.md"
done
