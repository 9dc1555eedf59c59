"""A CUDA actor for sandboxes: holds GiB of device memory filled with a known
pattern and answers on a unix socket, one command a connection:
  info    -> "OK <pid> <bytes>"
  touch   -> "OK <seconds>" after a small kernel (the first GPU operation)
  verify  -> "OK <seconds>" when every byte still holds the pattern and a
             kernel runs, else "MISMATCH ..."
Usage: holder_server.py GIB [SOCKET]   (default socket /tmp/holder.sock)
HOLDER_ZERO_GIB=N also holds N GiB of zeroed device memory, checked by verify.
"""
import os
import socket
import sys
import time

import torch

from holder import fill, verify, zeros


def main():
    path = sys.argv[2] if len(sys.argv) > 2 else "/tmp/holder.sock"
    data = fill(float(sys.argv[1]))
    zero_gib = float(os.environ.get("HOLDER_ZERO_GIB", "0"))
    zero = zeros(zero_gib) if zero_gib > 0 else None
    n = data.numel()
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
                reply = verify(data, zero)
            else:
                reply = f"ERROR unknown command {cmd!r}"
            conn.sendall((reply + "\n").encode())


if __name__ == "__main__":
    main()
