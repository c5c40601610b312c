#!/usr/bin/env python3
"""What one FUSE round trip costs: N getxattr(2) calls of an xattr that does
not exist on PATH (the kernel caches no xattrs, so each is a FUSE request;
mortar answers it from memory, no brick asked). Prints the wall time and the
caller's CPU per call; run `perf stat -p` on the file system's process
beside it for its side.

    scripts/fuse-roundtrip.py PATH [N]
"""
import os
import sys
import time

if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
    print(__doc__.strip())
    sys.exit(0)
p = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000


def one():
    try:
        os.getxattr(p, "user.none")
    except OSError:
        pass


one()
t = time.perf_counter()
c = time.process_time()
for _ in range(n):
    one()
w = time.perf_counter() - t
u = time.process_time() - c
print("%s: %.2f µs wall per getxattr, %.2f µs caller CPU" % (p, w / n * 1e6, u / n * 1e6))
