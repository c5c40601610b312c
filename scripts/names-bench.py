#!/usr/bin/env python3
"""Changes of names on a mount, timed: N files of 4 KiB written in a new
directory, then renamed, then unlinked, each step until the directory's
fsync returns (what a change answered ahead costs once it has landed).

    scripts/names-bench.py MOUNT [N] [--cold]

--cold syncs and drops the kernel's caches (the bricks' too, on one
machine) before the renames, as `mortar bench`'s smallfile-ops has by
then. Prints, per step, the time of the calls alone and with the fsync.
"""
import os
import sys
import time
import uuid


def fsync_dir(d):
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def step(d, name, n, op):
    start = time.monotonic()
    for i in range(n):
        op(i)
    calls = time.monotonic() - start
    fsync_dir(d)
    total = time.monotonic() - start
    print(f"{name:8} {n / total:8.0f} /s   calls {calls / n * 1e6:6.0f} us each, "
          f"then fsync {(total - calls) * 1e3:6.0f} ms")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if not args:
        sys.exit(__doc__)
    mnt, n = args[0], int(args[1]) if len(args) > 1 else 1000
    d = os.path.join(mnt, f"names-{uuid.uuid4().hex[:8]}")
    os.mkdir(d)
    data = b"x" * 4096

    def write(i):
        with open(os.path.join(d, f"f{i}"), "wb") as f:
            f.write(data)

    step(d, "write", n, write)
    if "--cold" in sys.argv:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
    step(d, "rename", n, lambda i: os.rename(os.path.join(d, f"f{i}"), os.path.join(d, f"g{i}")))
    step(d, "unlink", n, lambda i: os.unlink(os.path.join(d, f"g{i}")))
    os.rmdir(d)


if __name__ == "__main__":
    main()
