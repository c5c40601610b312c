#!/usr/bin/env python3
"""The steps of `mortar bench`'s smallfile-ops workload, each timed apart
from the directory fsync that ends it, with T threads over N files of
4 KiB (empty for "empty"), in a directory DIR/tT of any file system:

    scripts/smallfile-steps.py DIR THREADS [N]

Shows whether a step is slow in itself or pays for work the step before
left behind (docs/benchmarks.md, session 47)."""
import os
import sys
import threading
import time


def main():
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) > 1 else 2)
    root, th = sys.argv[1], int(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    d = os.path.join(root, "t%d" % th)
    os.makedirs(d, exist_ok=True)
    block = b"x" * 4096
    f = lambda i: os.path.join(d, "f%d" % i)
    g = lambda i: os.path.join(d, "g%d" % i)
    e = lambda i: os.path.join(d, "e%d" % i)

    def write(i, flags, at=None):
        fd = os.open(f(i), flags, 0o644)
        if at is None:
            os.write(fd, block)
        else:
            os.pwrite(fd, block, at)
        os.close(fd)

    def read(i):
        with open(f(i), "rb") as h:
            h.read()

    steps = [
        ("create", lambda i: write(i, os.O_CREAT | os.O_WRONLY | os.O_EXCL)),
        ("empty", lambda i: os.close(os.open(e(i), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644))),
        ("stat", lambda i: os.stat(f(i))),
        ("read", read),
        ("write", lambda i: write(i, os.O_WRONLY, 0)),
        ("append", lambda i: write(i, os.O_WRONLY | os.O_APPEND)),
        ("rename", lambda i: os.rename(f(i), g(i))),
        ("delete", lambda i: os.unlink(g(i))),
        ("empty delete", lambda i: os.unlink(e(i))),
    ]
    for name, op in steps:
        def run(t):
            for i in range(n * t // th, n * (t + 1) // th):
                op(i)
        ts = [threading.Thread(target=run, args=(t,)) for t in range(th)]
        t0 = time.time()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        t1 = time.time()
        fd = os.open(d, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        t2 = time.time()
        print("%-13s %7.0f/s  step %.3f s  fsync %.3f s  with fsync %7.0f/s"
              % (name, n / (t1 - t0), t1 - t0, t2 - t1, n / (t2 - t0)))
    os.rmdir(d)


if __name__ == "__main__":
    main()
