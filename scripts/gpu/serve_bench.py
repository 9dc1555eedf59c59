"""Serve on a GPU (scripts/gpu-e2e.sh serve): the 7B server (llm_server.py)
as a stasisd actor on its own network, its HTTP port published at
127.0.0.1:18000, and the first HTTP response to requests that arrive while it
is (a) paused with its sandbox kept in memory, (b) suspended on this node,
(c) stored only (its local copy removed: the wake pulls it from the store),
each beside the resume alone in the same run, taking turns, the medians of
STASIS_SERVE_REPS (3) of each, the page cache dropped before each of (b) and
(c); the cold start; 100 requests sent at once while it wakes
from (b), counted; and the idle suspend freeing the GPU. Writes
serve-summary.json (the keys of issue 42) and serve.jsonl into OUT.

Usage: serve_bench.py --bin DIR --helper FILE --scripts DIR --work DIR --out DIR [--commit C]
"""
import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
import time

PORT = 18000
IDLE_AFTER = 30


def main():
    p = argparse.ArgumentParser()
    for a in ("--bin", "--helper", "--scripts", "--work", "--out"):
        p.add_argument(a, required=True)
    p.add_argument("--commit", default="")
    p.add_argument("--gpus", default="1", help="GPUs of the actor (0: a smoke test of this script without one)")
    args = p.parse_args()
    bench = Bench(args)
    try:
        bench.run()
    finally:
        bench.stop()


class Bench:
    def __init__(self, args):
        self.a = args
        self.work = os.path.abspath(args.work)
        self.socket = os.path.join(self.work, "stasisd.sock")
        self.log = open(os.path.join(args.out, "serve.jsonl"), "a")
        self.stasisd = None
        self.summary = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": args.commit, "card": card()}

    def record(self, kind, **fields):
        fields["kind"] = kind
        line = json.dumps(fields)
        self.log.write(line + "\n")
        self.log.flush()
        print("RESULT", line, flush=True)

    def stasis(self, *argv):
        cmd = [os.path.join(self.a.bin, "stasis"), "--socket", self.socket, "--json", *argv]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()} {r.stdout.strip()}")
        return json.loads(r.stdout) if r.stdout.strip() else None

    def timed(self, *argv):
        t = time.monotonic()
        out = self.stasis(*argv)
        return time.monotonic() - t, out

    def run(self):
        weights = os.path.join(self.work, "weights")
        if not os.path.exists(os.path.join(weights, "config.json")):
            subprocess.run([python(), os.path.join(self.a.scripts, "llm_server.py"), "make", weights], check=True)
        bundle = self.write_bundle(weights)
        baseline = gpu_used_mib()
        self.start_stasisd()
        self.stasis("template", "create", "llm", "--bundle", bundle, "--gpus", self.a.gpus,
                    "--probe-cmd", f"{python()},/stasis-scripts/llm_client.py,/info,900", "--probe-timeout", "900",
                    "-p", f"127.0.0.1:{PORT}:8000", "--idle-after", f"{IDLE_AFTER}s", "--idle-then", "suspend", "--wake-timeout", "10m")

        drop_caches()
        t = time.monotonic()
        actor = self.stasis("actor", "run", "llm", "--id", "llm1")
        first = get("/token")
        cold = time.monotonic() - t
        token = first["token"]
        self.summary["cold_s"] = cold
        self.record("cold", seconds=cold, address=actor["network"]["address"], token=token)

        reps = int(os.environ.get("STASIS_SERVE_REPS", "3"))
        # (a) kept: the pause keeps the sandbox frozen in memory.
        wakes, resumes, alone = [], [], []
        for i in range(reps):
            paused = self.stasis("actor", "pause", "llm1")
            if "kept in memory" not in paused.get("reason", ""):
                self.record("note", message="the pause did not keep the sandbox: " + paused.get("reason", ""))
            wake = self.wake_batch(1, token)
            self.stasis("actor", "pause", "llm1")
            resume, _ = self.timed("actor", "resume", "llm1")
            tok = timed_get(token)
            wakes.append(wake["first_s"])
            resumes.append(resume + tok)
            alone.append(resume)
            self.record("kept", rep=i, wake=wake, resume_s=resume, token_s=tok)
        w, r = median(wakes), median(resumes)
        self.summary.update(wake_kept_s=w, kept_resume_s=median(alone), kept_resume_plus_request_s=r,
                            wake_kept_over_resume=w / r, kept_reps=reps)

        # (b) suspended on this node, (c) stored only (its local copy
        # removed: the wake pulls it from the store), REPS times each, the
        # wake and the resume alone taking turns; medians. The first wake of
        # (b) is 100 requests sent at once.
        for case, prepare in (("suspended", self.suspend_here), ("stored", self.suspend_stored_only)):
            wakes, resumes = [], []
            for i in range(reps):
                prepare()
                wake = self.wake_batch(100 if case == "suspended" and i == 0 else 1, token)
                if wake["sent"] == 100:
                    self.summary.update(requests_sent=wake["sent"], requests_lost=wake["lost"])
                prepare()
                resume, _ = self.timed("actor", "resume", "llm1")
                tok = timed_get(token)
                wakes.append(wake["first_s"])
                resumes.append(resume)
                self.record(case, rep=i, wake=wake, resume_s=resume, token_s=tok)
            w, r = median(wakes), median(resumes)
            self.summary.update({f"wake_{case}_s": w, f"{case}_resume_s": r, f"wake_{case}_over_resume": w / r,
                                 f"{case}_reps": reps})

        # The idle suspend: nothing uses it from here. The GPU is free once
        # its memory is back to what it was before the actor (the driver's
        # checkpoint moved it to the host); the suspend ends later, once the
        # snapshot is committed and stored.
        deadline = time.monotonic() + IDLE_AFTER
        free_at = suspended_at = None
        while suspended_at is None:
            now = time.monotonic()
            if now - deadline > 180:
                raise SystemExit("the idle actor was never suspended")
            if free_at is None and gpu_used_mib() <= baseline + 512:
                free_at = now
            if free_at is not None and self.stasis("actor", "inspect", "llm1")["state"] == "SUSPENDED":
                suspended_at = time.monotonic()
            time.sleep(0.1)
        self.summary.update(idle_after_s=IDLE_AFTER, idle_to_gpu_free_s=free_at - deadline,
                            idle_to_suspended_s=suspended_at - deadline)
        self.record("idle", gpu_free_s=free_at - deadline, suspended_s=suspended_at - deadline)
        with open(os.path.join(self.a.out, "serve-summary.json"), "w") as f:
            json.dump(self.summary, f, indent=2, sort_keys=True)
        print(json.dumps(self.summary, indent=2, sort_keys=True))

    def suspend_here(self):
        self.stasis("actor", "suspend", "llm1")
        drop_caches()

    def suspend_stored_only(self):
        a = self.stasis("actor", "suspend", "llm1")
        snap = a["snapshot"]
        if not snap.get("stored"):
            raise SystemExit("the snapshot was not stored: " + a.get("reason", ""))
        shutil.rmtree(snap["dir"], ignore_errors=True)
        drop_caches()

    def wake_batch(self, n, token):
        """Sends n requests at once to the paused or suspended actor; the
        first response's time from the send, the last's, and those lost."""
        start = time.monotonic()
        times, lost = [], []

        def one():
            try:
                got = get("/token")
                if got["token"] != token:
                    lost.append(f"token {got['token']}, want {token}")
                else:
                    times.append(time.monotonic() - start)
            except Exception as e:  # noqa: BLE001: any failure is a lost request
                lost.append(repr(e))

        threads = [threading.Thread(target=one) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if not times:
            raise SystemExit(f"no request was answered: {lost[:3]}")
        return {"sent": n, "lost": len(lost), "first_s": min(times), "last_s": max(times), "errors": lost[:5]}

    def write_bundle(self, weights):
        """An OCI bundle that runs the server on the host's own folders, as
        the engine's GPU tests do (bundle.HostSpec); stasisd adds the GPU."""
        d = os.path.join(self.work, "llm-bundle")
        rootfs = os.path.join(d, "rootfs")
        for sub in ("proc", "dev", "tmp"):
            os.makedirs(os.path.join(rootfs, sub), exist_ok=True)
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            if os.path.islink("/" + name) and not os.path.lexists(os.path.join(rootfs, name)):
                os.symlink(os.readlink("/" + name), os.path.join(rootfs, name))
        host = [h for h in ("/usr", "/etc", "/opt", "/usr/local/nvidia") if os.path.isdir(h)]
        binds = [(h, h) for h in host] + [(weights, "/weights"), (os.path.abspath(self.a.scripts), "/stasis-scripts")]
        spec = {
            "ociVersion": "1.2.1",
            "process": {"cwd": "/", "args": [python(), "/stasis-scripts/llm_server.py", "serve", "/weights"],
                        "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp",
                                "PYTHONUNBUFFERED=1", "LD_LIBRARY_PATH=/usr/local/nvidia/lib64", "HF_HUB_OFFLINE=1",
                                "NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1",
                                "LLM_LISTEN=:8000"]},
            "root": {"path": "rootfs"},
            "hostname": "llm",
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}] +
                      [{"destination": dst, "source": src, "type": "bind", "options": ["rbind", "ro"]} for src, dst in binds],
            "linux": {"namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "network")]},
        }
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(spec, f, indent=2)
        return d

    def start_stasisd(self):
        b = self.a.bin
        cmd = [os.path.join(b, "stasisd"), "--data", os.path.join(self.work, "data"), "--socket", self.socket,
               "--runsc", os.path.join(b, "runsc"), "--runsc-root", os.path.join(self.work, "runsc"),
               "--cni-bin-dir", b, "--cni-conf-dir", os.path.join(self.work, "cni-conf"),
               "--helper", self.a.helper, "--log-file", os.path.join(self.a.out, "stasisd.log"),
               "--host-path", self.work, "--host-path", os.path.abspath(self.a.scripts)]
        for h in ("/usr", "/etc", "/opt", "/usr/local/nvidia"):
            if os.path.isdir(h):
                cmd += ["--host-path", h]
        if os.environ.get("STASIS_NVPROXY_ABI"):
            cmd += ["--nvproxy-driver-version", os.environ["STASIS_NVPROXY_ABI"]]
        self.stasisd = subprocess.Popen(cmd)
        deadline = time.monotonic() + 60
        ps = [os.path.join(b, "stasis"), "--socket", self.socket, "actor", "ps"]
        while subprocess.run(ps, capture_output=True).returncode != 0:
            if self.stasisd.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("stasisd did not start (see stasisd.log)")
            time.sleep(0.1)

    def stop(self):
        if self.stasisd is None:
            return
        subprocess.run([os.path.join(self.a.bin, "stasis"), "--socket", self.socket, "actor", "rm", "llm1"], capture_output=True)
        self.stasisd.terminate()
        self.stasisd.wait(timeout=120)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def python():
    """The python3 on PATH, as the engine's GPU tests take it: it must lie
    under a host folder the sandbox gets (/usr, /opt)."""
    return shutil.which("python3")


def get(path):
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=900)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {body[:200]!r}")
        return json.loads(body)
    finally:
        conn.close()


def timed_get(token):
    t = time.monotonic()
    got = get("/token")
    if got["token"] != token:
        raise SystemExit(f"token {got['token']}, want {token}: the model did not come back intact")
    return time.monotonic() - t


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def gpu_used_mib():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def card():
    out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout
    return out.strip().splitlines()[0] if out.strip() else "unknown"


if __name__ == "__main__":
    main()
