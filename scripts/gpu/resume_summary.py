#!/usr/bin/env python3
"""Summary of the resume-speed benchmark (TestGPUResumeSpeed) for the issue
"Resume at the hardware's speed": reads OUTDIR/engine-gpu.jsonl, prints a
table of every variant and writes OUTDIR/resume-summary.json.

Usage: resume_summary.py OUTDIR VARIANT COMMIT [THP]
VARIANT is the engine's default way of resuming a snapshot (auto), whose figures
fill the summary's keys for a snapshot's resume. A warm node's figures
(resume_to_first_op_8gib_warm_s, the servers' resume_warm_s) are those of the
"kept" variant when the run has it: the sandbox that stasisd's pause keeps
frozen in memory while the node has room, resumed with nothing to load; the
same figures through the page cache are beside them (..._page_cache_s). THP ("shmem_enabled/defrag", as the
benchmark records it) picks the runs of one transparent huge page setting for
the summary when the output holds several; the table shows them all. A figure this run did not measure
is null, never a guess.
"""
import json
import os
import statistics
import sys
import time


def main():
    out, default, commit = sys.argv[1], sys.argv[2], sys.argv[3]
    thp = sys.argv[4] if len(sys.argv) > 4 else None
    rows = [json.loads(l) for l in open(os.path.join(out, "engine-gpu.jsonl")) if l.strip()]
    variants = [r for r in rows if r["kind"] == "resume-variant"]
    suspends = [r for r in rows if r["kind"] == "resume-suspend"]
    lines = ["| THP | GiB | variant | restore s | gpu-resume s | driver s | gpu-resume / driver | resume s | to first GPU op s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in variants:
        st = r["steps"]
        gpu = st.get("resume/gpu-resume", 0)
        lines.append(f"| {r.get('thp', '')} | {r['gib']:g} | {r['variant']} | {st.get('resume/restore', 0):.2f} | {gpu:.2f} | {r['driverRestoreS']:.2f} | "
                     f"{gpu / r['driverRestoreS']:.2f} | {r['resumeS']:.2f} | {r['resumeToFirstGPUOpS']:.2f} |")
    for r in rows:
        if r["kind"] == "resume-raw-flag-path":
            lines.append(f"| | {r['gib']:g} | runsc's flag path by hand | {r['restoreS']:.2f} | (in restore) | | | | {r['resumeToFirstGPUOpS']:.2f} |")
    lines += ["", "| THP | GiB | suspend s | image GB |", "|---|---|---|---|"]
    for r in suspends:
        lines.append(f"| {r.get('thp', '')} | {r['gib']:g} | {r['suspendS']:.2f} | {r['imageBytes'] / 1e9:.2f} |")
    servers = {}
    for r in rows:
        if r["kind"] == "server-resume":
            servers[(r.get("thp", ""), r["mode"])] = r
    if servers:
        lines += ["", "| THP | server | cold start s | resume kept s | x | resume page cache s | x | resume cold s | x |", "|---|---|---|---|---|---|---|---|---|"]
        for (t, mode), r in servers.items():
            fig = server([r], mode)
            fmt = lambda v, p=2: "" if v is None else f"{v:.{p}f}"
            lines.append(f"| {t} | {mode} | {fmt(fig['cold_s'], 1)} | {fmt(fig['resume_kept_s'])} | {fmt(fig['ratio_kept'], 1)} | "
                         f"{fmt(fig['resume_page_cache_s'])} | {fmt(fig['ratio_page_cache'], 1)} | {fmt(fig['resume_cold_s'])} | {fmt(fig['ratio_cold'], 1)} |")
    print("\n".join(lines))

    if thp:
        # The raw flag path and the floors are measured in the same test run as
        # the variants, so they are kept with that run's setting too.
        rows = [r for r in rows if r.get("thp", thp) == thp]
    floors = next((r for r in rows if r["kind"] == "resume-floors"), {})
    variants = [r for r in rows if r["kind"] == "resume-variant"]
    suspends = {r["gib"]: r for r in rows if r["kind"] == "resume-suspend"}
    raws = {r["gib"]: r for r in rows if r["kind"] == "resume-raw-flag-path"}

    def pick(gib, name):
        return [r for r in variants if r["gib"] == gib and r["variant"] == name]

    over = {}
    for gib in (1, 8, 32):
        got = pick(gib, default)
        over[str(gib)] = statistics.median(r["steps"].get("resume/gpu-resume", 0) / r["driverRestoreS"] for r in got) if got else None
    kept_over = {}
    for gib in (1, 8, 32):
        got = pick(gib, "kept")
        kept_over[str(gib)] = statistics.median(r["steps"].get("resume/gpu-resume", 0) / r["driverRestoreS"] for r in got) if got else None
    page_cache = pick(8, default)
    kept = pick(8, "kept")
    median_first_op = lambda rs: statistics.median(r["resumeToFirstGPUOpS"] for r in rs) if rs else None
    warm = kept or page_cache
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
        "thp": thp,
        "gpu_resume_over_driver": over,
        "gpu_resume_over_driver_kept": kept_over,
        "resume_to_first_op_8gib_warm_s": median_first_op(warm),
        "resume_8gib_warm_way": "kept" if kept else default,
        "resume_to_first_op_8gib_kept_s": median_first_op(kept),
        "resume_to_first_op_8gib_page_cache_s": median_first_op(page_cache),
        "resume_8gib_cold_over_floor": cold_ratio,
        "server_compiled": server(rows, "compiled"),
        "server_plain": server(rows, "plain"),
        "suspend_over_raw_8gib": suspends[8]["suspendS"] / raws[8]["checkpointS"] if 8 in suspends and 8 in raws else None,
        "suspend_over_raw_durable_8gib": suspends[8]["suspendS"] / (raws[8]["checkpointS"] + raws[8]["syncS"]) if 8 in suspends and "syncS" in raws.get(8, {}) else None,
        "suspend_8gib_s": suspends.get(8, {}).get("suspendS"),
        "raw_flag_path_8gib": raws.get(8),
        "floors": floors,
    }
    with open(os.path.join(out, "resume-summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))


def server(rows, mode):
    """The 7B server's figures in one mode (TestGPUServerResume), from its
    last record, which holds every part that run measured."""
    got = [r for r in rows if r["kind"] == "server-resume" and r.get("mode") == mode]
    if not got:
        return None
    r = got[-1]
    kept, page_cache = r.get("resume_kept_s"), r.get("resume_warm_s")
    out = {"cold_s": r.get("coldS"), "resume_warm_s": kept or page_cache, "warm_way": "kept" if kept else "page cache",
           "resume_kept_s": kept, "resume_page_cache_s": page_cache, "resume_cold_s": r.get("resume_cold_s")}
    for way in ("warm", "kept", "page_cache", "cold"):
        s = out["resume_%s_s" % way]
        out["ratio_" + way] = out["cold_s"] / s if s and out["cold_s"] else None
    return out


if __name__ == "__main__":
    main()
