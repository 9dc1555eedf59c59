#!/usr/bin/env python3
"""anywhere_summary.py OUTDIR COMMIT: docs/results/anywhere-summary.json's
keys from what scripts/gpu-e2e.sh anywhere left in OUTDIR (the last
"anywhere" record of each mode in engine-gpu.jsonl, pullbench.json,
golden-prestaged.json from the service suite), and a
table on stdout. Keys whose measurement did not run are null."""
import json
import os
import statistics
import sys
import time

out, commit = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
modes = {}
path = os.path.join(out, "engine-gpu.jsonl")
if os.path.exists(path):
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("kind") == "anywhere":
            modes[r["mode"]] = r

summary = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": commit}
bench = os.path.join(out, "pullbench.json")
rows = json.load(open(bench)) if os.path.exists(bench) else []
summary["pull_over_floor"] = statistics.median(r["pullOverFloor"] for r in rows) if rows else None
for mode in ("compiled", "plain"):
    r = modes.get(mode)
    summary[mode] = None if r is None else {k: r.get(k) for k in ("cold_s", "anywhere_s", "ratio", "local_s", "floor_s", "pull_s", "pull_over_floor", "push_s",
                                                       "written_s", "anywhere_unstaged_s", "unstaged_ratio",
                                                       "data_floor_s", "anywhere_over_data_floor", "suspend_s", "suspend_gpu_free_s",
                                                       "suspend_followed_s", "suspend_push_over_no_push", "local_push_whole_s",
                                                       "suspend_disk_write_gbs", "suspend_followed_disk_write_gbs",
                                                       "suspend_elsewhere_s", "push_elsewhere_s", "suspend_push_elsewhere_over_no_push",
                                                       "suspend_elsewhere_disk_write_gbs", "anywhere_warm_runtime_s", "anywhere_warm_rootfs_s", "anywhere_no_prefetch_s")}
plain = modes.get("plain", {})
# The fleet-wide figures: the plain server's, else the compiled one's.
for key in ("second_actor_fetched_fraction", "second_actor_over_local", "second_actor_over_first", "second_disk_over_store",
            "s3_over_local", "suspend_push_over_no_push", "suspend_gpu_free_s"):
    summary[key] = plain.get(key, modes.get("compiled", {}).get(key))
# scripts/gpu-e2e.sh service's golden_prestaged (a start from a staged copy
# of a golden snapshot against one from the node's own golden folder).
golden = os.path.join(out, "golden-prestaged.json")
summary["golden_prestaged_over_local"] = json.load(open(golden))["golden_prestaged_over_local"] if os.path.exists(golden) else None
print(json.dumps(summary, indent=2))
with open(os.path.join(out, "anywhere-summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
print("\n| server | cold start | anywhere | ratio | data floor | anywhere / data floor | own node | pull | pull / disk | suspend | GPU free after | with push (suspend + push after it) |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
for mode in ("compiled", "plain"):
    r = modes.get(mode)
    if r and "anywhere_s" in r:
        print(f"| {mode} | {r['cold_s']:.1f} s | {r['anywhere_s']:.2f} s | {r['ratio']:.1f}x | {r['data_floor_s']:.2f} s | {r['anywhere_over_data_floor']:.2f}x | {r['local_s']:.2f} s"
              f" | {r['pull_s']:.2f} s | {r['pull_over_floor']:.2f}x | {r['suspend_s']:.2f} s | {r['suspend_gpu_free_s']:.2f} s | {r['suspend_push_over_no_push']:.2f}x"
              f" ({r.get('suspend_followed_s') or 0:.2f} s + {r['push_s']:.2f} s) |")
    if r and "suspend_elsewhere_s" in r:
        print(f"| {mode}, pushed into a store off the image's disk | | | | | | | | | | | {r['suspend_push_elsewhere_over_no_push']:.2f}x"
              f" ({r['suspend_elsewhere_s']:.2f} s + {r['push_elsewhere_s']:.2f} s) |")
    for key, what in (("anywhere_no_prefetch_s", "no prefetch (the restore reads runsc and the held files' metadata itself)"),
                      ("anywhere_warm_runtime_s", "runsc's binary in the page cache"), ("anywhere_warm_rootfs_s", "the root file system's metadata in the page cache")):
        if r and key in r:
            print(f"| {mode}, again with {what} | | {r[key]:.2f} s | | | {r[key] / r['data_floor_s']:.2f}x | | | | | | |")
    if r and "second_s" in r:
        print(f"| {mode}, second actor (page cache dropped) | | {r['second_s']:.2f} s | {r['second_actor_over_first']:.2f}x the first | | | | | disk read {r['second_disk_read_bytes']/1e9:.2f} GB,"
              f" {r['second_disk_over_store']:.2f}x the store's {r['second_store_bytes']/1e9:.2f} GB | | | |")
    if r and "anywhere_unstaged_s" in r:
        print(f"| {mode}, written as it came | {r['cold_s']:.1f} s | {r['anywhere_unstaged_s']:.2f} s | {r['unstaged_ratio']:.1f}x | | | {r['pull_unstaged_s']:.2f} s | |")
