#!/usr/bin/env bash
# A/B of the suspend with and without the image writeback (commit 4251367),
# on the GPU machine as root: OUT=DIR scripts/gpu/ab-writeback.sh
# The engine GPU test built at 8520323, before the writeback, goes into the
# bundle beside HEAD's, on the build machine after scripts/build-gpu-bundle.sh:
#   git worktree add /tmp/old 8520323 && (cd /tmp/old && go test -c -tags gpu -o "$OLDPWD/.gpu-bundle/engine-gpu-old.test" ./engine) && gzip -f .gpu-bundle/engine-gpu-old.test
# Then the two alternate, twice, one 7.9 GiB actor each (7.9: no cold
# variants and no flag path by hand), into DIR/ab.jsonl, and
# BenchmarkWriteback runs three times into DIR/writeback.txt.
set -u
mkdir -p "$OUT/x"
for i in 1 2; do for b in engine-gpu-old.test engine-gpu.test; do
  d=$OUT/x/$i-$b; ENGINE_TEST=$b STASIS_RESUME_GIB=7.9 STASIS_RESUME_VARIANTS=auto ENGINE_TIMEOUT=4m scripts/gpu-e2e.sh resume $d > $d.log 2>&1 || echo "run $i $b failed"
  python3 -c "
import json,sys
for l in open('$d/engine-gpu.jsonl'):
    r=json.loads(l); r['build']='$b'; r['run']=$i; print(json.dumps(r))" >> $OUT/ab.jsonl
  grep -E '^--- ' $d/engine-gpu.log
done; done
rm -rf $OUT/x
STASIS_WRITEBACK_RUNS=3 scripts/gpu-e2e.sh writeback $OUT/wb > /dev/null 2>&1; mv $OUT/wb/writeback.txt $OUT/; rm -rf $OUT/wb
python3 - <<'P'
import json,os
for l in open(os.environ['OUT']+'/ab.jsonl'):
    r=json.loads(l)
    if r['kind']=='resume-suspend': print(r['build'], r['run'], round(r['suspendS'],2), {k:round(v,2) for k,v in r['steps'].items()})
P
grep Benchmark $OUT/writeback.txt
