"""Asks llm_server.py for PATH (/token or /info) and prints the JSON answer,
waiting up to TIMEOUT seconds (default 600) for the server to listen.
Usage: llm_client.py PATH [TIMEOUT]"""
import os
import sys
import time
import urllib.request


def main():
    deadline = time.monotonic() + float(sys.argv[2] if len(sys.argv) > 2 else 600)
    url = "http://127.0.0.1:%s%s" % (os.environ.get("LLM_PORT", "8000"), sys.argv[1])
    while True:
        try:
            with urllib.request.urlopen(url, timeout=600) as r:
                print(r.read().decode())
                return 0
        except OSError as e:
            if time.monotonic() > deadline:
                print(f"TIMEOUT {url}: {e}")
                return 1
            time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
