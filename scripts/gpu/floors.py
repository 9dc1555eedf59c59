"""Floors of the cold-start benchmark, measured on this machine: pinned and
pageable host<->device copy speed (4 GiB, PyTorch) and the disk's sequential
write speed (4 GiB with fsync, in DIR) and read speed (the same file, page
cache dropped); and the disk's write speed with O_DIRECT from 1 and 8 threads,
which says whether writing on more threads than a buffered stream's one would
be faster. Prints one JSON object. With --copies, only the copy speeds
(as measured inside a sandbox, where the disk is not the host's).
Usage: floors.py DIR | floors.py --copies"""
import json
import mmap
import os
import sys
import threading
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


def disk_write_direct(folder, threads):
    """GB/s of 4 GiB written with O_DIRECT in 16 MiB writes, the file split
    into one contiguous range per thread, then fsynced."""
    path = os.path.join(folder, "floors-disk-direct")
    size, chunk = 4 << 30, 16 << 20
    buf = mmap.mmap(-1, chunk)  # page-aligned, as O_DIRECT needs
    buf.write(os.urandom(chunk))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
        os.fsync(fd)
        per = size // threads

        def write(first):
            for off in range(first, first + per, chunk):
                os.pwrite(fd, buf, off)

        t = time.monotonic()
        workers = [threading.Thread(target=write, args=(i * per,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        os.fsync(fd)
        return size / (time.monotonic() - t) / 1e9
    finally:
        os.close(fd)
        os.remove(path)


def main():
    res = {"pinned": copy_speed(True), "pageable": copy_speed(False)}
    if sys.argv[1] != "--copies":
        res.update(disk_write(sys.argv[1]))
        res["diskWriteDirectGBps"] = {str(n): disk_write_direct(sys.argv[1], n) for n in (1, 8)}
    print(json.dumps(res))


if __name__ == "__main__":
    main()
