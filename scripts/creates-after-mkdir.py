#!/usr/bin/env python3
"""Creates in a directory made just before, round after round, on a mount.

Each round makes a new directory, then at once creates FILES files of 4 KiB
in it (THREADS threads, each its share) and prints the round's creates per
second, how long the opens took, and the slowest write and close. On mortar, creates in a directory this
mount made are answered ahead of the bricks while the mount's claim on it
holds (docs/caching.md); a round where the claim was lost shows opens of
1 to 20 ms and a few hundred creates per second instead of thousands.

Usage: scripts/creates-after-mkdir.py DIR [ROUNDS=16] [FILES=1000] [THREADS=1] [PAUSE=0]
(PAUSE: seconds between the mkdir and the first create.)
"""
import collections
import os
import sys
import threading
import time


def main():
    top = sys.argv[1]
    arg = lambda i, default: sys.argv[i] if len(sys.argv) > i else default
    rounds, files, threads = int(arg(2, 16)), int(arg(3, 1000)), int(arg(4, 1))
    pause = float(arg(5, 0))
    base = f"{top}/round-{os.getpid()}"
    os.mkdir(base)
    for r in range(rounds):
        d = f"{base}/{r}"
        lat = []

        slowest = {"open": 0.0, "write": 0.0, "close": 0.0}

        def work(start, n):
            for i in range(start, start + n):
                t = time.time()
                fd = os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644)
                t1 = time.time()
                lat.append(t1 - t)
                os.write(fd, b"x" * 4096)
                t2 = time.time()
                os.close(fd)
                t3 = time.time()
                slowest["open"] = max(slowest["open"], t1 - t)
                slowest["write"] = max(slowest["write"], t2 - t1)
                slowest["close"] = max(slowest["close"], t3 - t2)

        os.mkdir(d)
        time.sleep(pause)
        t0 = time.time()
        share = files // threads
        ts = [threading.Thread(target=work, args=(k * share, share)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        took = time.time() - t0
        hist = collections.Counter(
            "<1ms" if x < 0.001 else "<5ms" if x < 0.005 else "<20ms" if x < 0.02 else ">=20ms" for x in lat
        )
        worst = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in slowest.items())
        print(f"round {r}: {share * threads / took:.0f} creates/s, opens {dict(sorted(hist.items()))}, slowest {worst}")


main()
