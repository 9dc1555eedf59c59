#!/usr/bin/env python3
"""End-to-end check and benchmark of stasis-cuda on a real GPU.

Usage: cuda_e2e.py --helper PATH --out DIR [--sizes 1,8,32] [--reps 3]
       cuda_e2e.py raw PID        (one raw-driver cycle on PID, JSON on stdout)

Checks (each printed PASS/FAIL, all written to DIR/cuda-e2e.json):
  - an 8 GiB PyTorch process: suspend --all releases the GPU (nvidia-smi lists
    no compute process of it), resume --all brings it back, its data is bit for
    bit the pattern it wrote and a kernel runs;
  - two 8 GiB processes at once, the same;
  - the cuda-checkpoint compatible --toggle and --get-state path;
  - a pid that is not a CUDA process gets cuda-checkpoint's error line.
Benchmark: per size, the raw driver calls (ctypes, in their own process,
cuInit outside the timing) against stasis-cuda suspend --all / resume --all
wall time, and the helper's own driver time from its --json report.
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable


class Holder:
    def __init__(self, gib):
        self.p = subprocess.Popen([PY, os.path.join(HERE, "holder.py"), str(gib)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline().split()
        if not line or line[0] != "READY":
            raise RuntimeError(f"holder {gib} GiB did not start: {line}")
        self.pid = int(line[1])
        self.bytes = int(line[2])

    def verify(self):
        self.p.stdin.write("verify\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def close(self):
        try:
            self.p.stdin.write("exit\n")
            self.p.stdin.flush()
        except BrokenPipeError:
            pass
        self.p.wait(timeout=60)


def compute_pids():
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout
    return {int(x) for x in out.split()}


def helper(path, *args):
    t0 = time.monotonic()
    r = subprocess.run([path, *args], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr, time.monotonic() - t0


def raw_cycle(pid):
    """Lock+checkpoint, then restore+unlock, timed around the driver calls only."""
    lib = ctypes.CDLL("libcuda.so.1")
    t0 = time.monotonic()
    init_rc = lib.cuInit(0)
    init_s = time.monotonic() - t0
    args = ctypes.create_string_buffer(64)
    out = {"init_rc": init_rc, "init_s": init_s}
    t0 = time.monotonic()
    out["lock_rc"] = lib.cuCheckpointProcessLock(pid, args)
    t1 = time.monotonic()
    out["checkpoint_rc"] = lib.cuCheckpointProcessCheckpoint(pid, args)
    t2 = time.monotonic()
    out["restore_rc"] = lib.cuCheckpointProcessRestore(pid, args)
    t3 = time.monotonic()
    out["unlock_rc"] = lib.cuCheckpointProcessUnlock(pid, args)
    t4 = time.monotonic()
    out.update(lock_s=t1 - t0, checkpoint_s=t2 - t1, restore_s=t3 - t2, unlock_s=t4 - t3)
    return out


def no_init_probe(pid):
    """Whether the checkpoint calls work from a process that never ran cuInit."""
    lib = ctypes.CDLL("libcuda.so.1")
    state = ctypes.c_int(-1)
    args = ctypes.create_string_buffer(64)
    out = {"get_state_rc": lib.cuCheckpointProcessGetState(pid, ctypes.byref(state)), "state": state.value}
    t0 = time.monotonic()
    out["lock_rc"] = lib.cuCheckpointProcessLock(pid, args)
    out["checkpoint_rc"] = lib.cuCheckpointProcessCheckpoint(pid, args)
    out["restore_rc"] = lib.cuCheckpointProcessRestore(pid, args)
    out["unlock_rc"] = lib.cuCheckpointProcessUnlock(pid, args)
    out["cycle_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    out["init_rc"] = lib.cuInit(0)
    out["init_s"] = time.monotonic() - t0
    return out


class Checks:
    def __init__(self):
        self.items = []

    def __call__(self, name, ok, detail=""):
        self.items.append({"name": name, "ok": bool(ok), "detail": str(detail)})
        print(f"{'PASS' if ok else 'FAIL'} {name} {detail}", flush=True)


def driver_seconds(report_json):
    rep = json.loads(report_json)
    return max((o["durationNs"] for o in rep.get("outcomes", [])), default=0) / 1e9, rep


def e2e(h, check):
    a = Holder(8)
    try:
        rc, out, err, _ = h("status", "--all", "--json")
        rep = json.loads(out)
        check("status lists the 8 GiB process as running", rc == 0 and any(p["pid"] == a.pid and p["state"] == "running" for p in rep["processes"]), out.strip()[:300])
        rc, out, err, wall = h("suspend", "--all", "--json")
        check("suspend --all exits 0", rc == 0, f"{wall:.2f}s {err.strip()[-300:]}")
        check("GPU released: nvidia-smi lists no compute process of it", a.pid not in compute_pids(), compute_pids())
        rc, out, err, _ = h("--get-state", "--pid", str(a.pid))
        check("--get-state says checkpointed", rc == 0 and out == "checkpointed\n", repr(out))
        rc, out, err, wall = h("resume", "--all", "--json")
        check("resume --all exits 0", rc == 0, f"{wall:.2f}s {err.strip()[-300:]}")
        v = a.verify()
        check("8 GiB data bit-identical and a kernel runs", v.startswith("OK"), v)
        rc, out, err, _ = h("suspend", "--all", "--json")
        rc2, _, _, _ = h("resume", "--all", "--json")
        check("a second cycle on the same process", rc == 0 and rc2 == 0 and a.verify().startswith("OK"))
    finally:
        a.close()

    a, b = Holder(8), Holder(8)
    try:
        rc, out, err, wall = h("suspend", "--all", "--json")
        _, rep = driver_seconds(out) if rc == 0 else (0, {})
        pids = {o["pid"] for o in rep.get("outcomes", [])}
        check("two processes: suspend --all takes both", rc == 0 and {a.pid, b.pid} <= pids, f"{wall:.2f}s pids={sorted(pids)}")
        left = compute_pids() & {a.pid, b.pid}
        check("two processes: GPU released", not left, left)
        rc, out, err, wall = h("resume", "--all", "--json")
        va, vb = a.verify(), b.verify()
        check("two processes: resumed, both bit-identical", rc == 0 and va.startswith("OK") and vb.startswith("OK"), f"{wall:.2f}s {va} {vb}")
    finally:
        a.close()
        b.close()

    a = Holder(1)
    try:
        rc, out, err, wall = h("--toggle", "--pid", str(a.pid))
        rc2, state, _, _ = h("--get-state", "--pid", str(a.pid))
        check("--toggle checkpoints silently", rc == 0 and out == "" and err == "" and state == "checkpointed\n" and a.pid not in compute_pids(), f"{wall:.2f}s {state!r} {err!r}")
        rc, out, err, wall = h("--toggle", "--pid", str(a.pid))
        rc2, state, _, _ = h("--get-state", "--pid", str(a.pid))
        check("--toggle restores", rc == 0 and state == "running\n" and a.verify().startswith("OK"), f"{wall:.2f}s {state!r}")
        rc, out, err, _ = h("--get-restore-tid", "--pid", str(a.pid))
        check("--get-restore-tid prints a thread id", rc == 0 and out.strip().isdigit(), repr(out))
    finally:
        a.close()

    rc, out, err, _ = h("--get-state", "--pid", "1")
    check("a pid that is not a CUDA process: exit 1 and cuda-checkpoint's line", rc == 1 and err.startswith("Error getting process state for process ID 1: \""), repr(err))
    rc, out, err, _ = h("--action", "lock", "--pid", str(os.getpid()))
    check("lock of a non-CUDA pid fails with the driver's message", rc == 1 and err.startswith(f"Could not lock on process ID {os.getpid()}: \""), repr(err))
    rc, out, err, _ = h("--version")
    check("--version names the release and the driver API", rc == 0 and "CUDA driver API" in out, out.strip())


def bench(h, sizes, reps, check):
    rows = []
    for gib in sizes:
        a = Holder(gib)
        try:
            probe = None
            if gib == sizes[0]:
                r = subprocess.run([PY, __file__, "probe", str(a.pid)], capture_output=True, text=True)
                probe = json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr[-500:]}
                print("no-cuInit probe:", probe, flush=True)
            for rep in range(reps):
                r = subprocess.run([PY, __file__, "raw", str(a.pid)], capture_output=True, text=True)
                raw = json.loads(r.stdout)
                ok_raw = all(raw[k] == 0 for k in ("lock_rc", "checkpoint_rc", "restore_rc", "unlock_rc"))
                v_raw = a.verify()
                rc_s, out_s, err_s, wall_s = h("suspend", "--all", "--json")
                drv_s, _ = driver_seconds(out_s) if rc_s == 0 else (float("nan"), None)
                rc_r, out_r, err_r, wall_r = h("resume", "--all", "--json")
                drv_r, _ = driver_seconds(out_r) if rc_r == 0 else (float("nan"), None)
                v = a.verify()
                check(f"bench {gib} GiB rep {rep}: raw and helper cycles intact", ok_raw and v_raw.startswith("OK") and rc_s == 0 and rc_r == 0 and v.startswith("OK"), f"{raw} {v_raw} {v}")
                rows.append({
                    "gib": gib, "rep": rep,
                    "raw_suspend_s": raw["lock_s"] + raw["checkpoint_s"],
                    "raw_resume_s": raw["restore_s"] + raw["unlock_s"],
                    "raw_init_s": raw["init_s"],
                    "helper_suspend_wall_s": wall_s, "helper_suspend_driver_s": drv_s,
                    "helper_resume_wall_s": wall_r, "helper_resume_driver_s": drv_r,
                    "probe": probe,
                })
                print(json.dumps(rows[-1]), flush=True)
        finally:
            a.close()
    return rows


def overhead_probe(h, reps=5):
    """Where the helper's fixed cost goes: a bare process start and exit
    (--help loads no driver), driver load plus scan (status --all), and the
    helper's own phase timings from its --json report."""
    a = Holder(1)
    out = {"help_s": [], "status_wall_s": [], "status_steps": [], "suspend_steps": [], "resume_steps": [], "suspend_wall_s": [], "resume_wall_s": []}
    try:
        for _ in range(reps):
            out["help_s"].append(h("--help")[3])
            rc, o, _, wall = h("status", "--all", "--json")
            out["status_wall_s"].append(wall)
            out["status_steps"].append(json.loads(o).get("stepsNs"))
            for verb in ("suspend", "resume"):
                rc, o, _, wall = h(verb, "--all", "--json")
                out[verb + "_wall_s"].append(wall)
                out[verb + "_steps"].append(json.loads(o).get("stepsNs"))
        out["verify"] = a.verify()
    finally:
        a.close()
    print("overhead probe:", json.dumps(out), flush=True)
    return out


def table(rows):
    lines = ["| GiB | raw lock+checkpoint (s) | stasis-cuda suspend --all (s) | its driver time (s) | overhead (ms) | raw restore+unlock (s) | stasis-cuda resume --all (s) | its driver time (s) | overhead (ms) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for gib in sorted({r["gib"] for r in rows}):
        rs = [r for r in rows if r["gib"] == gib]
        med = lambda k: statistics.median(r[k] for r in rs)
        lines.append(f"| {gib} | {med('raw_suspend_s'):.2f} | {med('helper_suspend_wall_s'):.2f} | {med('helper_suspend_driver_s'):.2f} | "
                     f"{1000 * (med('helper_suspend_wall_s') - med('helper_suspend_driver_s')):.0f} | {med('raw_resume_s'):.2f} | "
                     f"{med('helper_resume_wall_s'):.2f} | {med('helper_resume_driver_s'):.2f} | "
                     f"{1000 * (med('helper_resume_wall_s') - med('helper_resume_driver_s')):.0f} |")
    return "\n".join(lines)


def main():
    if len(sys.argv) == 3 and sys.argv[1] in ("raw", "probe"):
        fn = raw_cycle if sys.argv[1] == "raw" else no_init_probe
        print(json.dumps(fn(int(sys.argv[2]))))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--helper", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", default="1,8,32", help='GiB per benchmark actor, or "none"')
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--skip-e2e", action="store_true")
    ap.add_argument("--overhead", action="store_true", help="only probe where the helper's fixed cost goes")
    args = ap.parse_args()
    h = lambda *a: helper(args.helper, *a)
    check = Checks()
    if args.overhead:
        with open(os.path.join(args.out, "cuda-overhead.json"), "w") as f:
            json.dump(overhead_probe(h), f, indent=2)
        return 0
    if not args.skip_e2e:
        e2e(h, check)
    sizes = [] if args.sizes == "none" else [float(s) if "." in s else int(s) for s in args.sizes.split(",") if s]
    rows = bench(h, sizes, args.reps, check) if sizes else []
    result = {"checks": check.items, "bench": rows, "table": table(rows) if rows else ""}
    with open(os.path.join(args.out, "cuda-e2e.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(result["table"])
    failed = [c["name"] for c in check.items if not c["ok"]]
    print(f"{len(check.items) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
