#!/usr/bin/env python3
"""Where the time of a GPU resume goes inside the sandbox, by system call:
reads the runsc debug logs in LOGDIR (STASIS_RUNSC_DEBUG) holding the
sentry's strace of the kept resumes of TestGPUResumeSpeed
(STASIS_RESUME_STRACE), whose windows are in OUTDIR/engine-gpu.jsonl, and
prints per window the calls by thread name, call and target (an ioctl's
file and request), with their count and summed time, and the longest single
calls. The window's lines also go, gzipped, to OUTDIR/strace-GIB.log.gz.

Usage: strace_summary.py LOGDIR OUTDIR

The sentry times each call from its entry to its exit; strace's own logging
makes every call slower, so the counts are exact and the times are upper
bounds.
"""
import collections
import datetime
import glob
import gzip
import json
import os
import re
import sys

LINE = re.compile(r"^[IWDE](\d{4}) (\d\d:\d\d:\d\d\.\d+)\s+\d+\s+\S+\] \[\s*(\d+):\s*(\d+)\] (\S+) X (\w+)\((.*)\) = (.*) \(([^()]*)\)\s*$")
IOCTL = re.compile(r"^(0x[0-9a-f]+|\d+)(?: ([^,]*))?, (0x[0-9a-f]+|\d+)")
UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
PART = re.compile(r"([0-9.]+)(ns|us|µs|ms|s|m|h)")


def seconds(d):
    """A Go duration string (1m2.5s, 12.3µs) in seconds."""
    return sum(float(n) * UNITS[u] for n, u in PART.findall(d))


def when(year, mmdd, clock):
    t = datetime.datetime.strptime(f"{year}{mmdd} {clock}", "%Y%m%d %H:%M:%S.%f")
    return t.replace(tzinfo=datetime.timezone.utc)


def main():
    logdir, out = sys.argv[1], sys.argv[2]
    windows = []
    for l in open(os.path.join(out, "engine-gpu.jsonl")):
        r = json.loads(l)
        w = r.get("strace") or {}
        if w.get("straceFrom"):
            windows.append((r["gib"], datetime.datetime.fromisoformat(w["straceFrom"].replace("Z", "+00:00")),
                            datetime.datetime.fromisoformat(w["straceTo"].replace("Z", "+00:00"))))
    if not windows:
        print("no strace windows in", out)
        return
    for gib, start, end in windows:
        calls = collections.defaultdict(lambda: [0, 0.0, 0.0])
        longest = []
        threads = collections.Counter()
        kept = []
        for path in sorted(glob.glob(os.path.join(logdir, "*"))):
            with open(path, errors="replace") as f:
                for line in f:
                    m = LINE.match(line)
                    if not m:
                        continue
                    at = when(start.year, m.group(1), m.group(2))
                    if at < start or at > end:
                        continue
                    kept.append(line)
                    name, call, args, took = m.group(5), m.group(6), m.group(7), seconds(m.group(9))
                    target = ""
                    if call == "ioctl":
                        a = IOCTL.match(args)
                        if a:
                            target = f"{a.group(2) or a.group(1)} {a.group(3)}"
                    key = (name, call, target)
                    c = calls[key]
                    c[0] += 1
                    c[1] += took
                    c[2] = max(c[2], took)
                    threads[(name, m.group(4))] += 1
                    longest.append((took, at.strftime("%H:%M:%S.%f"), name, m.group(4), call, target))
        span = (end - start).total_seconds()
        total = sum(c[1] for c in calls.values())
        print(f"## {gib:g} GiB kept resume: {span:.3f} s window, {sum(c[0] for c in calls.values())} calls, {total:.3f} s summed over threads")
        print()
        print("| thread | call | target | count | summed s | longest ms |")
        print("|---|---|---|---|---|---|")
        for (name, call, target), (n, s, mx) in sorted(calls.items(), key=lambda kv: -kv[1][1])[:40]:
            print(f"| {name} | {call} | {target} | {n} | {s:.4f} | {mx * 1e3:.2f} |")
        print()
        print("Busiest threads (calls): " + ", ".join(f"{n}/{tid} {c}" for (n, tid), c in threads.most_common(8)))
        print()
        print("| longest calls | at | thread | call | target | ms |")
        print("|---|---|---|---|---|---|")
        for took, at, name, tid, call, target in sorted(longest, reverse=True)[:20]:
            print(f"| | {at} | {name}/{tid} | {call} | {target} | {took * 1e3:.2f} |")
        print()
        with gzip.open(os.path.join(out, f"strace-{gib:g}.log.gz"), "wt") as f:
            f.writelines(kept)


if __name__ == "__main__":
    main()
