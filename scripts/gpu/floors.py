"""Floors of the cold-start benchmark, measured on this machine: pinned and
pageable host<->device copy speed (4 GiB, PyTorch) and the disk's sequential
write speed (4 GiB with fsync, in DIR) and read speed (the same file, page
cache dropped). Prints one JSON object. With --copies, only the copy speeds
(as measured inside a sandbox, where the disk is not the host's).
Usage: floors.py DIR | floors.py --copies"""
import json
import os
import sys
import time

import torch


def copy_speed(pinned):
    n = 4 << 30
    host = torch.empty(n, dtype=torch.uint8, pin_memory=pinned)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    out = {}
    for name, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
        dst.copy_(src)
        torch.cuda.synchronize()
        t = time.monotonic()
        dst.copy_(src)
        torch.cuda.synchronize()
        out[name + "GiBps"] = 4 / (time.monotonic() - t)
    return out


def disk_write(folder):
    path = os.path.join(folder, "floors-disk-test")
    block = os.urandom(64 << 20)
    t = time.monotonic()
    with open(path, "wb") as f:
        for _ in range(64):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    write_s = time.monotonic() - t
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
    t = time.monotonic()
    with open(path, "rb", buffering=0) as f:
        while f.read(64 << 20):
            pass
    read_s = time.monotonic() - t
    os.remove(path)
    return {"diskWriteGBps": 4 * (1 << 30) / write_s / 1e9, "diskReadGBps": 4 * (1 << 30) / read_s / 1e9}


def main():
    res = {"pinned": copy_speed(True), "pageable": copy_speed(False)}
    if sys.argv[1] != "--copies":
        res.update(disk_write(sys.argv[1]))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
