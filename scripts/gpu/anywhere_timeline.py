#!/usr/bin/env python3
"""anywhere_timeline.py ENGINE-GPU.JSONL...: where each resume of
TestGPUAnywhere spent its time, from its "anywhere-timeline" records (the
steps' ends and the machine sampled every 100 ms): how fast the disk read
before and after the kernel began writing the pulled copy back, and the
cores busy. One table row per resume; then, where the samples name them,
the core-seconds each command ran over each resume (its busiest five)."""
import json
import sys


def rate(samples, key):
    """Mean of key over samples (MB/s or cores), 0 for none."""
    return sum(s[key] for s in samples) / len(samples) if samples else 0.0


def gb(samples, key):
    """GB moved over samples, each 0.1 s apart."""
    total, prev = 0.0, 0.0
    for s in samples:
        total += s[key] * (s["t"] - prev) / 1000
        prev = s["t"]
    return total


by_command = []
print("| run | mode | snapshot | vm.dirty_background | resumed | write-back began | read before | read after | disk read | disk written | busy cores |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    settings = {}
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("kind") == "anywhere" and "writeback" in r:
            w = r["writeback"]
            settings[r["mode"]] = f"{w['backgroundBytes'] / 2**30:.0f} GiB" if w.get("backgroundBytes") else f"{w.get('backgroundRatio')}%"
        if r.get("kind") != "anywhere-timeline" or not r.get("samples"):
            continue
        samples = r["samples"]
        end = max((s["t"] for s in r["steps"]), default=samples[-1]["t"])
        # Write-back has begun at the first of three samples in a row that
        # write 100 MB/s (one such sample can be anything's).
        began = next((samples[i]["t"] for i in range(len(samples) - 2)
                      if all(s["writeMBs"] > 100 for s in samples[i:i + 3])), None)
        before = [s for s in samples if began is None or s["t"] <= began]
        after = [s for s in samples if began is not None and s["t"] > began and s["readMBs"] > 50]
        setting = settings.get(r["mode"], "the machine's")
        name = r["snapshot"] + (" (seeded)" if r.get("seeded") else "") + (" (pulled whole)" if r.get("whole") else "") + \
            (" (written as it came)" if r.get("unstaged") else "")
        began_s = "not" if began is None else f"{began:.1f} s"
        after_s = "-" if not after else f"{rate(after, 'readMBs') / 1000:.2f} GB/s"
        print(f"| {path.rsplit('/', 1)[-1]} | {r['mode']} | {name} | {setting} | {end:.2f} s | {began_s} | "
              f"{rate(before, 'readMBs') / 1000:.2f} GB/s | {after_s} | {gb(samples, 'readMBs'):.1f} GB | {gb(samples, 'writeMBs'):.1f} GB | {rate(samples, 'busyCores'):.1f} |")
        commands = {}
        prev = 0.0
        for s in samples:
            for comm, cores in s.get("commands", {}).items():
                commands[comm] = commands.get(comm, 0.0) + cores * (s["t"] - prev)
            prev = s["t"]
        if commands:
            top = sorted(commands.items(), key=lambda kv: -kv[1])[:5]
            by_command.append((r["mode"], name, end, top))

if by_command:
    print()
    print("| mode | snapshot | resumed | core-seconds by command (the busiest five) |")
    print("|---|---|---|---|")
    for mode, name, end, top in by_command:
        print(f"| {mode} | {name} | {end:.2f} s | " + ", ".join(f"{c} {v:.1f}" for c, v in top) + " |")
