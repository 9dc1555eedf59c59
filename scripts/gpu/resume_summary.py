#!/usr/bin/env python3
"""Summary of the resume-speed benchmark (TestGPUResumeSpeed) for the issue
"Resume at the hardware's speed": reads OUTDIR/engine-gpu.jsonl, prints a
table of every variant and writes OUTDIR/resume-summary.json.

Usage: resume_summary.py OUTDIR VARIANT COMMIT
VARIANT is the engine's default way of resuming (lazy: runsc restore --background),
whose figures fill the summary's keys. A figure this run did not measure
is null, never a guess.
"""
import json
import os
import statistics
import sys
import time


def main():
    out, default, commit = sys.argv[1], sys.argv[2], sys.argv[3]
    rows = [json.loads(l) for l in open(os.path.join(out, "engine-gpu.jsonl")) if l.strip()]
    floors = next((r for r in rows if r["kind"] == "resume-floors"), {})
    variants = [r for r in rows if r["kind"] == "resume-variant"]
    suspends = {r["gib"]: r for r in rows if r["kind"] == "resume-suspend"}
    raws = {r["gib"]: r for r in rows if r["kind"] == "resume-raw-flag-path"}
    lines = ["| GiB | variant | restore s | gpu-resume s | driver s | gpu-resume / driver | resume s | to first GPU op s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in variants:
        st = r["steps"]
        gpu = st.get("resume/gpu-resume", 0)
        lines.append(f"| {r['gib']:g} | {r['variant']} | {st.get('resume/restore', 0):.2f} | {gpu:.2f} | {r['driverRestoreS']:.2f} | "
                     f"{gpu / r['driverRestoreS']:.2f} | {r['resumeS']:.2f} | {r['resumeToFirstGPUOpS']:.2f} |")
    for gib, r in sorted(raws.items()):
        lines.append(f"| {gib:g} | runsc's flag path by hand | {r['restoreS']:.2f} | (in restore) | | | | {r['resumeToFirstGPUOpS']:.2f} |")
    print("\n".join(lines))

    def pick(gib, name):
        return [r for r in variants if r["gib"] == gib and r["variant"] == name]

    over = {}
    for gib in (1, 8, 32):
        got = pick(gib, default)
        over[str(gib)] = statistics.median(r["steps"].get("resume/gpu-resume", 0) / r["driverRestoreS"] for r in got) if got else None
    warm = pick(8, default)
    cold = pick(8, default + "+cold")
    cold_ratio = None
    if cold and floors.get("diskReadGBps"):
        r = cold[0]
        floor = r["imageBytes"] / 1e9 / floors["diskReadGBps"] + r["driverRestoreS"]
        cold_ratio = r["resumeToFirstGPUOpS"] / floor
    summary = {
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit,
        "variant": default,
        "gpu_resume_over_driver": over,
        "resume_to_first_op_8gib_warm_s": statistics.median(r["resumeToFirstGPUOpS"] for r in warm) if warm else None,
        "resume_8gib_cold_over_floor": cold_ratio,
        "server_compiled": None,
        "server_plain": None,
        "suspend_over_raw_8gib": suspends[8]["suspendS"] / raws[8]["checkpointS"] if 8 in suspends and 8 in raws else None,
        "suspend_8gib_s": suspends.get(8, {}).get("suspendS"),
        "raw_flag_path_8gib": raws.get(8),
        "floors": floors,
    }
    with open(os.path.join(out, "resume-summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
