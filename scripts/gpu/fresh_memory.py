"""What writing into memory the kernel had just freed costs on this machine:
4 GiB written into a memfd (as a pull stages a memory image) right after the
page cache is dropped, then again into memory freed by the first. On a
micro-VM whose freed memory goes back to its host, the first is slower.
Prints one JSON object. Usage: fresh_memory.py"""
import json
import os
import resource
import time


def write_memfd(size, block):
    fd = os.memfd_create("fresh-memory")
    try:
        os.ftruncate(fd, size)
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        for at in range(0, size, len(block)):
            os.pwrite(fd, block, at)
        t1, r1 = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        return {"s": t1 - t0, "cpu_s": cpu, "GBps": size / (t1 - t0) / 1e9}
    finally:
        os.close(fd)


def main():
    size, block = 4 << 30, os.urandom(1 << 20)
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
    out = {"after_drop": write_memfd(size, block)}
    out["again"] = write_memfd(size, block)
    out["again2"] = write_memfd(size, block)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
