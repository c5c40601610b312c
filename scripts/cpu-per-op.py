#!/usr/bin/env python3
"""Where each small-file operation's CPU goes: per operation, the CPU time
and system calls of the client (the FUSE mount), of the brick processes and
of the management daemon, the brick requests the client sent, and the
application's own CPU and wall time.

A private daemon (on a free port) serves a replica-3 volume of three bricks under
a temporary directory; one mount; N files of 4 KiB in directories of 100
(the shape of issue 44's table). Each operation runs over every file in a
fresh process (so `stat` asks as "another process" does), while `perf stat`
counts task-clock and system calls of each process group. Everything made
is removed at the end.

    scripts/cpu-per-op.py [--mortar BIN] [--files N] [--threads T]
                          [--base DIR] [--opt KEY=VALUE ...] [--pool-opt KEY=VALUE ...]
                          [--record OP]
                          [--reps K] [--json]
    scripts/cpu-per-op.py --dir DIR [--pid PID ...]   # the same ops elsewhere

--base puts the bricks elsewhere: on this machine's ext4 (no journal) a
create right after many deletes scans the recently freed inodes, so the
bricks' CPU per create moves by 2x with what ran in the last 30 s; in
/dev/shm it is mortar's own. --record OP also samples the client and one brick with `perf record -g`
during OP and prints their hottest symbols. --dir runs the operations in an
existing directory (the local disk, a bindfs mount) and counts the CPU of
the processes given with --pid (bindfs's) as "client".
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

OPS = ["create", "stat", "read", "append", "overwrite", "rename", "delete"]
BLOCK = b"x" * 4096
PER_DIR = 100
REQUESTS_XATTR = "trusted.mortar.client.requests"


def paths(root, n):
    return [os.path.join(root, "d%02d" % (i // PER_DIR), "f%05d" % i) for i in range(n)]


def do_op(op, root, n, threads):
    """Runs one operation over every file (in this process), split among threads."""
    files = paths(root, n)
    if op == "create":
        for d in sorted({os.path.dirname(p) for p in files}):
            os.makedirs(d, exist_ok=True)

    def one(p):
        if op == "create":
            fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
            os.write(fd, BLOCK)
            os.close(fd)
        elif op == "stat":
            os.stat(p)
        elif op == "read":
            fd = os.open(p, os.O_RDONLY)
            os.read(fd, 65536)
            os.close(fd)
        elif op == "append":
            fd = os.open(p, os.O_WRONLY | os.O_APPEND)
            os.write(fd, BLOCK)
            os.close(fd)
        elif op == "overwrite":
            fd = os.open(p, os.O_WRONLY)
            os.pwrite(fd, BLOCK, 0)
            os.close(fd)
        elif op == "rename":
            os.rename(p, p + ".r")
        elif op == "delete":
            os.unlink(p + ".r")

    def run(part):
        for p in part:
            one(p)

    if threads <= 1:
        run(files)
    else:
        ts = [threading.Thread(target=run, args=(files[k::threads],)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


class Counter:
    """`perf stat` on a group of processes (and the threads they start)."""

    def __init__(self, pids, out):
        self.out = out
        self.proc = None
        if pids:
            self.proc = subprocess.Popen(
                ["perf", "stat", "-x", ",", "-e", "task-clock,raw_syscalls:sys_enter,context-switches",
                 "-p", ",".join(str(p) for p in pids), "-o", out],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self):
        """CPU seconds, system calls and context switches counted since the start."""
        if self.proc is None:
            return 0.0, 0, 0
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait()
        cpu, calls, switches = 0.0, 0, 0
        with open(self.out) as f:
            for line in f:
                fields = line.strip().split(",")
                if len(fields) < 3 or fields[0].startswith("<"):
                    continue
                if fields[2].startswith("task-clock"):
                    cpu = float(fields[0]) / 1000.0
                elif fields[2] == "raw_syscalls:sys_enter":
                    calls = int(float(fields[0]))
                elif fields[2] == "context-switches":
                    switches = int(float(fields[0]))
        return cpu, calls, switches


def requests(mnt):
    try:
        return int(os.getxattr(mnt, REQUESTS_XATTR))
    except OSError:
        return 0


def settle(mnt):
    """Seconds until the mount sends no more requests (what it answered
    ahead or closed behind has landed), polled every 20 ms."""
    t0 = time.monotonic()
    last, quiet = requests(mnt), 0
    while quiet < 3 and time.monotonic() - t0 < 30:
        time.sleep(0.02)
        now = requests(mnt)
        quiet = quiet + 1 if now == last else 0
        last = now
    return max(0.0, time.monotonic() - t0 - 0.06)


def measure(args, root, mnt, groups, work):
    rows = []
    for op in OPS:
        time.sleep(0.5)  # the last operation's background requests (releases) end
        before = requests(mnt) if mnt else 0
        counters = {g: Counter(p, os.path.join(work, "perf-%s-%s" % (op, g))) for g, p in groups.items()}
        recorders = []
        if args.record == op:
            for g in ("client", "brick"):
                if groups.get(g):
                    out = os.path.join(work, "record-%s" % g)
                    recorders.append((g, out, subprocess.Popen(
                        ["perf", "record", "-g", "-q", "-o", out, "-p", str(groups[g][0])],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
        time.sleep(0.3)  # perf attached
        t0 = time.monotonic()
        child = subprocess.run(
            [sys.executable, __file__, "--phase", op, "--root", root,
             "--files", str(args.files), "--threads", str(args.threads)],
            check=True, capture_output=True, text=True)
        wall = time.monotonic() - t0
        app = float(child.stdout.split()[0])
        # What was answered ahead or closed behind lands, and releases
        # follow: counted with the operation that left them.
        landed = wall + (settle(mnt) if mnt else 0.0)
        time.sleep(0.5)
        used = {g: c.stop() for g, c in counters.items()}
        for g, out, rec in recorders:
            rec.send_signal(signal.SIGINT)
            rec.wait()
            print("\n## perf record: %s, %s (hottest symbols, self time)\n" % (g, op))
            report = subprocess.run(
                ["perf", "report", "-i", out, "--no-children", "--sort", "sym", "-g", "none",
                 "--stdio", "--percent-limit", "0.7"],
                capture_output=True, text=True).stdout
            print("\n".join(l for l in report.splitlines() if l.strip() and not l.startswith("#")))
        n = args.files
        row = {"op": op, "ops_per_s": n / wall, "landed_per_s": n / landed, "app_us": app / n * 1e6}
        for g in groups:
            cpu, calls, switches = used[g]
            row[g + "_us"] = cpu / n * 1e6
            row[g + "_syscalls"] = calls / n
            row[g + "_switches"] = switches / n
            if g == "brick":
                # (The volume's three bricks, in three processes or one.)
                row["per_brick_us"] = cpu / n * 1e6 / 3
        if mnt:
            row["requests"] = (requests(mnt) - before) / n
        rows.append(row)
    return rows


def table(rows, groups, mounted):
    cols = [("op", "operation", "%s"), ("ops_per_s", "ops/s", "%.0f")]
    if any("landed_per_s" in r for r in rows):
        cols.append(("landed_per_s", "ops/s landed", "%.0f"))
    cols.append(("app_us", "app µs", "%.0f"))
    for g in groups:
        cols.append((g + "_us", g + " µs", "%.0f"))
        if g == "brick":
            cols.append(("per_brick_us", "per brick µs", "%.0f"))
        cols.append((g + "_syscalls", g + " syscalls", "%.1f"))
        cols.append((g + "_switches", g + " switches", "%.1f"))
    if mounted:
        cols.append(("requests", "requests", "%.1f"))
    print("| " + " | ".join(c[1] for c in cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(c[2] % r[c[0]] for c in cols) + " |")


def serve(args, work):
    """A daemon, a replica-3 volume and its mount; returns the groups of pids."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = str(free.getsockname()[1])
    env = dict(os.environ, MORTAR_CREDENTIAL=os.path.join(work, "state/tls/admin.pem"))
    log = open(os.path.join(work, "daemon.log"), "w")
    daemon = subprocess.Popen(
        [args.mortar, "daemon", "--listen", "127.0.0.1:" + port, "--host", "127.0.0.1",
         "--state-dir", os.path.join(work, "state")], stdout=log, stderr=log, env=env)

    def m(*a):
        return subprocess.run([args.mortar, "--server", "127.0.0.1:" + port] + list(a),
                              env=env, capture_output=True, text=True)
    for _ in range(100):
        if m("volume", "list").returncode == 0:
            break
        time.sleep(0.1)
    bricks = [os.path.join(work, "b%d" % i) for i in (1, 2, 3)]
    steps = [["volume", "set", "all"] + kv.split("=", 1) for kv in args.pool_opt]
    steps += [["volume", "create", "cpu", "replica", "3"] + ["127.0.0.1:" + b for b in bricks] + ["force"]]
    steps += [["volume", "set", "cpu"] + kv.split("=", 1) for kv in args.opt]
    steps += [["volume", "start", "cpu"]]
    for s in steps:
        r = m(*s)
        if r.returncode != 0:
            sys.exit("mortar %s: %s" % (" ".join(s), r.stderr.strip()))
    mnt = os.path.join(work, "mnt")
    os.mkdir(mnt)
    r = subprocess.run([args.mortar, "mount", "--port", port, "127.0.0.1:/cpu", mnt],
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("mortar mount: " + r.stderr.strip())

    def pids(pattern):
        out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]
    groups = {
        "client": pids("mortar mount .*" + mnt),
        "brick": pids("mortar-brick --(path|host --run) " + work),
        "daemon": [daemon.pid],
    }
    return daemon, mnt, groups


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mortar", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "../target/release/mortar"))
    p.add_argument("--files", type=int, default=2000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--base", default="/var/tmp",
                   help="where the bricks go (/dev/shm leaves the disk's file system out)")
    p.add_argument("--opt", action="append", default=[], help="volume option KEY=VALUE")
    p.add_argument("--pool-opt", action="append", default=[],
                   help="pool option KEY=VALUE (volume set all), e.g. cluster.brick-multiplex=off")
    p.add_argument("--record", choices=OPS, help="perf record the client and a brick during OP")
    p.add_argument("--dir", help="run in this directory instead of a mortar volume")
    p.add_argument("--pid", type=int, action="append", default=[], help="with --dir: the file system's process")
    p.add_argument("--reps", type=int, default=1,
                   help="run it all this many times (a fresh volume each) and show medians")
    p.add_argument("--json", action="store_true")
    p.add_argument("--phase", help=argparse.SUPPRESS)
    p.add_argument("--root", help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.phase:
        t = os.times()
        do_op(args.phase, args.root, args.files, args.threads)
        u = os.times()
        print(u.user - t.user + u.system - t.system)
        return
    if shutil.which("perf") is None:
        sys.exit("perf is missing: apt-get install linux-perf")

    runs = [one_run(args) for _ in range(args.reps)]
    rows = [median_row([run[0][i] for run in runs]) for i in range(len(OPS))]
    groups, mounted = runs[0][1], runs[0][2]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print("\n%d files of 4 KiB, %d thread(s), %s; µs of CPU, system calls and context "
              "switches per file%s\n" % (args.files, args.threads,
                                         "bricks in " + args.base if mounted else args.dir,
                                         ", medians of %d runs" % args.reps if args.reps > 1 else ""))
        table(rows, groups, mounted)


def median_row(rows):
    out = {"op": rows[0]["op"]}
    for k in rows[0]:
        if k != "op":
            v = sorted(r[k] for r in rows)
            out[k] = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    return out


def one_run(args):
    """One volume (or directory), every operation: the rows, the process groups, mounted."""
    work = tempfile.mkdtemp(prefix="mortar-cpu.", dir=args.base)
    daemon = None
    mnt = None
    root = None
    try:
        if args.dir:
            root = tempfile.mkdtemp(prefix="cpu-per-op.", dir=args.dir)
            groups = {"client": args.pid} if args.pid else {}
        else:
            daemon, mnt, groups = serve(args, work)
            root = os.path.join(mnt, "t")
        return measure(args, root, mnt, groups, work), groups, mnt is not None
    finally:
        if args.dir and root:
            shutil.rmtree(root, ignore_errors=True)
        if mnt:
            subprocess.run(["umount", "-l", mnt], stderr=subprocess.DEVNULL)
        if daemon:
            daemon.terminate()
            daemon.wait()
        subprocess.run(["pkill", "-f", "mortar-brick --(path|host --run) " + work], stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
