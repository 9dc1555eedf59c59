"""A CUDA actor for sandboxes: holds GiB of device memory filled with a known
pattern and answers on a unix socket, one command a connection:
  info    -> "OK <pid> <bytes>"
  touch   -> "OK <seconds>" after a small kernel (the first GPU operation)
  verify  -> "OK <seconds>" when every byte still holds the pattern and a
             kernel runs, else "MISMATCH ..."
Usage: holder_server.py GIB [SOCKET]   (default socket /tmp/holder.sock)
"""
import os
import socket
import sys
import time

import torch

from holder import CHUNK, pattern


def main():
    gib = float(sys.argv[1])
    path = sys.argv[2] if len(sys.argv) > 2 else "/tmp/holder.sock"
    n = int(gib * (1 << 30)) // 8
    data = torch.empty(n, dtype=torch.int64, device="cuda")
    for start in range(0, n, CHUNK):
        end = min(n, start + CHUNK)
        data[start:end] = pattern(start, end, "cuda")
    torch.cuda.synchronize()
    # Bind under a temporary name and rename, so the socket appears ready.
    tmp = path + ".new"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(tmp)
    srv.listen(4)
    os.rename(tmp, path)
    print(f"READY {os.getpid()} {n * 8}", flush=True)
    while True:
        conn, _ = srv.accept()
        with conn:
            cmd = conn.recv(64).decode().strip()
            t0 = time.monotonic()
            if cmd == "info":
                reply = f"OK {os.getpid()} {n * 8}"
            elif cmd == "touch":
                x = torch.ones(256, device="cuda")
                ok = float(x.sum()) == 256.0
                reply = f"OK {time.monotonic() - t0:.4f}" if ok else "MISMATCH touch"
            elif cmd == "verify":
                bad = -1
                for start in range(0, n, CHUNK):
                    end = min(n, start + CHUNK)
                    if not torch.equal(data[start:end], pattern(start, end, "cuda")):
                        bad = start
                        break
                a = torch.ones(1024, 1024, device="cuda")
                ok_kernel = float((a @ a)[0, 0]) == 1024.0
                torch.cuda.synchronize()
                reply = f"OK {time.monotonic() - t0:.3f}" if bad < 0 and ok_kernel else f"MISMATCH {bad} kernel_ok={ok_kernel}"
            else:
                reply = f"ERROR unknown command {cmd!r}"
            conn.sendall((reply + "\n").encode())


if __name__ == "__main__":
    main()
