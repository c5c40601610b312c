#!/bin/bash
# Bitrot scrub throughput: a replica-3 volume on this host with bitrot on;
# FILES files of MIB MiB in all written through the mount; then `scrub
# ondemand` at THROTTLE, timed until every brick's scrub has finished,
# with the daemon's CPU time over it. One copy's block is flipped first,
# and the scrub must find and repair it.
#
# The data is in the page cache (just written): what is measured is the
# scrub's own cost, not the disk's speed.
#
# Usage: scripts/scrub-bench.sh   (env: MORTAR=path/to/mortar DIR=/var/tmp/mortar-scrub FILES=1000 MIB=1024 THROTTLE=aggressive)
set -euo pipefail
B=${MORTAR:-mortar}
D=${DIR:-/var/tmp/mortar-scrub}
FILES=${FILES:-1000}
MIB=${MIB:-1024}
THROTTLE=${THROTTLE:-aggressive}
IP=127.0.0.9
P=24176
S="--server $IP:$P"

cleanup() {
    umount -l "$D/mnt" 2>/dev/null || true
    pkill -f "state-dir $D/state" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
rm -rf "$D" && mkdir -p "$D"/{b1,b2,b3,mnt}
export MORTAR_CREDENTIAL=$D/state/tls/admin.pem
"$B" daemon --listen $IP:$P --host $IP --state-dir "$D/state" >"$D/daemon.log" 2>&1 &
DAEMON=$!
for _ in $(seq 50); do "$B" $S volume list >/dev/null 2>&1 && break; sleep 0.1; done
"$B" $S volume create sb replica 3 $IP:"$D/b1" $IP:"$D/b2" $IP:"$D/b3" force >/dev/null
"$B" $S volume start sb >/dev/null
"$B" $S volume bitrot sb enable >/dev/null
"$B" $S volume bitrot sb scrub-throttle "$THROTTLE" >/dev/null
sleep 1
"$B" mount --port $P $IP:/sb "$D/mnt" --log-file "$D/client.log"
python3 - "$D/mnt" "$FILES" "$MIB" <<'PY'
import os, sys
root, n, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
size = mib * 1048576 // n
for i in range(n):
    with open(os.path.join(root, f"f{i}"), "wb") as f:
        f.write(os.urandom(size))
        os.fsync(f.fileno())
PY
sync
# A rotten block in one copy.
python3 - "$D/b1/f0" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(100); f.write(b"\x5a" * 10)
PY
runs() { "$B" $S --json volume bitrot sb scrub status | python3 -c 'import json,sys; print(sum(b["runs"] for b in json.load(sys.stdin)))'; }
before=$(runs)
# The daemon and the brick processes it started (its children).
cpu() { local t=0; for p in $DAEMON $(pgrep -P $DAEMON); do t=$((t + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $t; }
cpu0=$(cpu)
t0=$(date +%s.%N)
"$B" $S volume bitrot sb scrub ondemand >/dev/null
while [ "$(runs)" -lt $((before + 3)) ]; do sleep 0.2; done
t1=$(date +%s.%N)
cpu1=$(cpu)
hz=$(getconf CLK_TCK)
python3 - "$t0" "$t1" "$cpu0" "$cpu1" "$hz" "$MIB" <<'PY'
import sys
t0, t1, c0, c1, hz, mib = map(float, sys.argv[1:])
secs = t1 - t0
print(f"scrubbed 3 x {mib:.0f} MiB in {secs:.1f} s: {3 * mib / secs:.0f} MiB/s; CPU of the daemon and bricks {(c1 - c0) / hz:.1f} s ({(c1 - c0) / hz / secs * 100:.0f}% of a core)")
PY
"$B" $S volume bitrot sb scrub status | grep -E "Brick:|Error count|repaired"
