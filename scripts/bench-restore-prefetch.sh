#!/usr/bin/env bash
# What runsc's restore reads beside the image, and Engine.Prefetch: a
# Python process that imported every module it could (its sandbox's root
# file system is the host's, read-only) is suspended by stasis; then, with
# the page cache dropped and the image read back into it (as a pull's view
# serves it), it is restored RUNS times each way: alone, by runsc restore
# itself, and by stasis resume (which prefetches runsc's binary and the
# metadata of the files the sandbox held), both alone and with four
# readers of the same disk (O_DIRECT, 8 MiB reads) that start as a pull
# would (once stasis's prefetch is done; 0.05 s into runsc's restore,
# before it opens the sandbox's files). Prints a table of the
# restore's seconds (runsc's whole command; stasis's prefetch and restore
# step).
# Needs root, runsc on PATH and python3. Knobs: RUNS (3), READER_GIB (2,
# each of the four readers' file), BENCH_DIR (a folder on the disk to
# measure; default a new one under /var/tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/cgo-env.sh
runs="${RUNS:-3}"
work="${BENCH_DIR:-$(mktemp -d /var/tmp/stasis-prefetch.XXXXXX)}"
mkdir -p "$work"
python="$(python3 -c 'import sys; print(sys.executable)')"
runsc=(runsc --root "$work/runsc" --platform systrap --network none)
cleanup() {
	"${runsc[@]}" delete -force prefetch >/dev/null 2>&1 || true
	# stasis's runsc keeps an empty network namespace mounted here.
	umount -l "$work/runsc/null-netns" 2>/dev/null || true
	[ -n "${BENCH_DIR:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/stasis" ./cmd/stasis
mkdir -p "$work/bundle" "$work/runsc" "$work/data"
cat >"$work/imports.py" <<'EOF'
import importlib, pkgutil, time
n = 0
for m in pkgutil.iter_modules():
    if m.name in ("antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo"):
        continue
    try:
        importlib.import_module(m.name)
        n += 1
    except BaseException:
        pass
print("imported", n, flush=True)
while True:
    time.sleep(1)
EOF
python3 - "$work" "$python" <<'EOF'
import json, sys
work, python = sys.argv[1], sys.argv[2]
json.dump({
    "ociVersion": "1.0.2",
    "process": {"user": {"uid": 0, "gid": 0}, "args": [python, work + "/imports.py"], "env": ["PATH=/usr/bin:/bin", "HOME=/root"], "cwd": "/"},
    "root": {"path": "/", "readonly": True},
    "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}, {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"}],
    "linux": {"namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "network")]},
}, open(work + "/bundle/config.json", "w"))
EOF
for i in 1 2 3 4; do
	[ -f "$work/reader$i" ] || head -c "$((${READER_GIB:-2} << 30))" /dev/urandom >"$work/reader$i"
done

"${runsc[@]}" run --bundle "$work/bundle" --detach prefetch >"$work/console.log" 2>&1
until grep -q '^imported' "$work/console.log"; do
	"${runsc[@]}" state prefetch >/dev/null 2>&1 || { cat "$work/console.log" >&2; exit 1; }
	sleep 0.2
done
stasis=("$work/stasis" --data "$work/data")
"${stasis[@]}" suspend prefetch --bundle "$work/bundle" --snapshot "$work/snap" --runsc-root "$work/runsc" --network none >/dev/null
held="$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1])).get("openFiles", [])))' "$work/snap/manifest.json")"

# restore WAY BUSY prints the restore's seconds (stasis: its prefetch's,
# then its restore step's).
restore() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
	cat "$work"/snap/image/* >/dev/null
	local began readers=() took
	began="$(date +%s.%N)"
	if [ "$1" = runsc ]; then
		"${runsc[@]}" restore --image-path "$work/snap/image" --bundle "$work/bundle" --detach prefetch >"$work/out" 2>&1 &
	else
		"${stasis[@]}" resume prefetch --bundle "$work/bundle" --snapshot "$work/snap" --runsc-root "$work/runsc" --network none --verify sizes >"$work/out" 2>&1 &
	fi
	local cmd=$!
	if [ "$2" = busy ]; then
		# As a pull does: it starts reading once the prefetch is done
		# (stasis says so in a note), or, without one, as the restore
		# begins.
		if [ "$1" = stasis ]; then
			until grep -q "read into the page cache" "$work/out" || ! kill -0 "$cmd" 2>/dev/null; do sleep 0.01; done
		else
			sleep 0.05
		fi
		for i in 1 2 3 4; do
			dd if="$work/reader$i" of=/dev/null bs=8M iflag=direct status=none &
			readers+=($!)
		done
	fi
	wait "$cmd" || { cat "$work/out" >&2; exit 1; }
	took="$(echo "$(date +%s.%N) - $began" | bc)"
	[ "${#readers[@]}" = 0 ] || kill "${readers[@]}" 2>/dev/null || true
	wait 2>/dev/null || true
	"${runsc[@]}" delete -force prefetch >/dev/null 2>&1
	if [ "$1" = runsc ]; then
		printf '%.2f' "$took"
	else
		# The restore step, and the prefetch's note before it.
		awk '$1 == "restore" { v = $2; if (v ~ /ms$/) { sub(/ms$/, "", v); v /= 1000 } else sub(/s$/, "", v) }
			match($0, /held, in [0-9.]+ s/) { p = substr($0, RSTART + 9, RLENGTH - 11) }
			END { printf "%.2f + %.2f", p, v }' "$work/out"
	fi
}

echo "the sandbox held $held files of its root file system; runs: $runs; readers: 4 x ${READER_GIB:-2} GiB in $work"
echo
echo "| run | runsc restore alone | stasis resume: prefetch + restore, alone | runsc restore beside the readers | stasis resume: prefetch + restore, beside the readers |"
echo "|---|---|---|---|---|"
for run in $(seq "$runs"); do
	echo "| $run | $(restore runsc idle) s | $(restore stasis idle) s | $(restore runsc busy) s | $(restore stasis busy) s |"
done
