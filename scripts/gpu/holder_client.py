"""Asks holder_server.py a command and prints the answer; exits 0 on "OK".
Usage: holder_client.py COMMAND [SOCKET] [READY_TIMEOUT_S]
Waits up to READY_TIMEOUT_S (default 300) for the server's socket: the
server needs that long to import PyTorch and fill its memory."""
import os
import socket
import sys
import time


def main():
    cmd = sys.argv[1]
    path = sys.argv[2] if len(sys.argv) > 2 else "/tmp/holder.sock"
    deadline = time.monotonic() + float(sys.argv[3] if len(sys.argv) > 3 else 300)
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            print(f"TIMEOUT waiting for {path}")
            return 1
        time.sleep(0.05)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall((cmd + "\n").encode())
    reply = s.makefile().readline().strip()
    print(reply)
    return 0 if reply.startswith("OK") else 1


if __name__ == "__main__":
    sys.exit(main())
