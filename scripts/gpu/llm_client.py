"""Asks llm_server.py for PATH (/token or /info) over its unix socket
(LLM_SOCKET, default /tmp/llm.sock) and prints the JSON answer, waiting up to
TIMEOUT seconds (default 300) for the server to listen.
Usage: llm_client.py PATH [TIMEOUT]"""
import http.client
import os
import socket
import sys
import time


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("llm", timeout=600)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.unix_path)


def main():
    deadline = time.monotonic() + float(sys.argv[2] if len(sys.argv) > 2 else 300)
    path = os.environ.get("LLM_SOCKET", "/tmp/llm.sock")
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            print(f"TIMEOUT waiting for {path}")
            return 1
        time.sleep(0.05)
    conn = UnixConnection(path)
    conn.request("GET", sys.argv[1])
    resp = conn.getresponse()
    print(resp.read().decode())
    return 0 if resp.status == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
