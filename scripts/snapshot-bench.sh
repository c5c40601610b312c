#!/bin/bash
# Snapshot create time and the pause a writer sees: a replica-3 volume on
# this host with its bricks on a loop-mounted btrfs or XFS (reflink)
# image; FILES small files are written through the mount, then a writer
# (a 4 KiB write and fsync, then a new file, over and over) runs while
# `snapshot create` is asked. Prints the create's wall time, how long the
# bricks held changes back (the snapshot's record), and the writer's
# longest operation before and during the create.
#
# Usage: scripts/snapshot-bench.sh    (env: MORTAR=path/to/mortar FS=btrfs|xfs FILES=1000 DIR=/var/tmp/mortar-snap)
set -euo pipefail
B=${MORTAR:-mortar}
FS=${FS:-btrfs}
FILES=${FILES:-1000}
D=${DIR:-/var/tmp/mortar-snap}
IP=127.0.0.10
P=24174
S="--server $IP:$P"

cleanup() {
    umount -l "$D/mnt" 2>/dev/null || true
    pkill -f "state-dir $D/state" 2>/dev/null || true
    sleep 0.5
    umount -l "$D/fs" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
rm -rf "$D" && mkdir -p "$D"/{fs,mnt}
truncate -s 20G "$D/image"
case "$FS" in
    btrfs) mkfs.btrfs -q -f "$D/image" ;;
    xfs) mkfs.xfs -q -f -m reflink=1 "$D/image" ;;
    *) echo "FS is btrfs or xfs" >&2; exit 2 ;;
esac
mount -o loop,noatime "$D/image" "$D/fs"
export MORTAR_CREDENTIAL=$D/state/tls/admin.pem
"$B" daemon --listen $IP:$P --host $IP --state-dir "$D/state" >"$D/daemon.log" 2>&1 &
for _ in $(seq 50); do "$B" $S volume list >/dev/null 2>&1 && break; sleep 0.1; done
"$B" $S volume create sb replica 3 $IP:"$D/fs/b1" $IP:"$D/fs/b2" $IP:"$D/fs/b3" force >/dev/null
"$B" $S volume start sb >/dev/null
"$B" mount --port $P $IP:/sb "$D/mnt" --log-file "$D/client.log"
sleep 1
echo "$FS bricks; writing $FILES files ..."
python3 - "$D/mnt" "$FILES" <<'PY'
import os, sys, time
from concurrent.futures import ThreadPoolExecutor
root, n = sys.argv[1], int(sys.argv[2])
per = 1000
t = time.time()
def part(d):
    os.makedirs(f"{root}/d{d}", exist_ok=True)
    for i in range(d * per, min(n, (d + 1) * per)):
        with open(f"{root}/d{d}/f{i}", "wb") as f:
            f.write(b"x" * 4096)
with ThreadPoolExecutor(4) as ex:
    list(ex.map(part, range((n + per - 1) // per)))
print(f"written in {time.time() - t:.1f} s")
PY
python3 - "$D/mnt" "$B" "$S" <<'PY'
import json, os, subprocess, sys, threading, time
root, mortar, server = sys.argv[1], sys.argv[2], sys.argv[3].split()
ops = []  # (start, seconds)
stop = threading.Event()
def writer():
    os.makedirs(f"{root}/w", exist_ok=True)
    fd = os.open(f"{root}/w/log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    i = 0
    while not stop.is_set():
        t = time.monotonic()
        os.write(fd, b"y" * 4096)
        os.fsync(fd)
        ops.append((t, time.monotonic() - t))
        t = time.monotonic()
        with open(f"{root}/w/n{i}", "wb"):
            pass
        ops.append((t, time.monotonic() - t))
        i += 1
w = threading.Thread(target=writer)
w.start()
time.sleep(3)
asked = time.monotonic()
out = subprocess.run([mortar, *server, "snapshot", "create", "s1", "sb", "no-timestamp"], capture_output=True, text=True)
answered = time.monotonic()
time.sleep(2)
stop.set()
w.join()
if out.returncode != 0:
    sys.exit(f"snapshot create failed: {out.stderr}")
info = json.loads(subprocess.run([mortar, *server, "--json", "snapshot", "info", "s1"], capture_output=True, text=True, check=True).stdout)[0]
before = max((d for t, d in ops if t + d < asked), default=0)
during = max((d for t, d in ops if t < answered and t + d > asked), default=0)
n_before = sum(1 for t, d in ops if t + d < asked)
print(f"snapshot create: {answered - asked:.3f} s wall; changes held back on the bricks {info['pause_ms']} ms ({', '.join(sorted(set(info['mechanisms'])))})")
print(f"writer: longest operation {before * 1000:.1f} ms in the 3 s before ({n_before} ops), {during * 1000:.1f} ms during the create")
PY
