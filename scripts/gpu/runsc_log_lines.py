#!/usr/bin/env python3
"""Lines of runsc debug logs that say where a restore's time went.

usage: runsc_log_lines.py DEBUGDIR OUT.gz

Keeps, from every log file under DEBUGDIR, the lines about timers (runsc's
restore timeline, printed as one message of many lines once the restore's
pages are all loaded), memory loading, restore and nvproxy's restore, each
with the continuation lines of its message, prefixed by the file's name; at
most 20,000 lines a file, so that a chatty log cannot fill the output.
"""
import gzip
import os
import re
import sys

WANTED = re.compile(r"Timer for|[Tt]imeline|page loading|MemoryFile|[Rr]estor|took \[|waiters|Starting sandbox|kernel load")
# A new message starts with glog's prefix: I1205 07:12:34.567890  1234 file.go:12]
PREFIX = re.compile(r"^[IDWEF]\d{4} \d\d:\d\d:\d\d")
LIMIT = 20000


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with gzip.open(dst, "wt") as out:
        for root, _, names in os.walk(src):
            for name in sorted(names):
                path = os.path.join(root, name)
                kept, keep = 0, False
                with open(path, errors="replace") as f:
                    for line in f:
                        if PREFIX.match(line):
                            keep = bool(WANTED.search(line))
                        if keep and kept < LIMIT:
                            out.write(name + " " + line[:600].rstrip("\n") + "\n")
                            kept += 1


if __name__ == "__main__":
    main()
