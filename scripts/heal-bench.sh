#!/bin/bash
# Heal throughput: a replica-3 volume on this host; one brick is frozen
# (SIGSTOP, taken out by a 2 s ping timeout) while FILES files of MIB MiB in
# all are written through the mount; then it is thawed and `volume heal` is
# asked; the time from its return until `heal info` shows nothing pending is
# the heal time.
#
# Usage: scripts/heal-bench.sh        (env: MORTAR=path/to/mortar DIR=/var/tmp/mortar-heal FILES=10000 MIB=1024 PER_DIR=1000)
set -euo pipefail
B=${MORTAR:-mortar}
D=${DIR:-/var/tmp/mortar-heal}
FILES=${FILES:-10000}
MIB=${MIB:-1024}
PER_DIR=${PER_DIR:-1000}
IP=127.0.0.9
P=24175
S="--server $IP:$P"

cleanup() {
    umount -l "$D/mnt" 2>/dev/null || true
    [ -n "${BRICK:-}" ] && kill -CONT "$BRICK" 2>/dev/null || true
    pkill -f "state-dir $D/state" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
rm -rf "$D" && mkdir -p "$D"/{b1,b2,b3,mnt}
export MORTAR_CREDENTIAL=$D/state/tls/admin.pem
"$B" daemon --listen $IP:$P --host $IP --state-dir "$D/state" >"$D/daemon.log" 2>&1 &
for _ in $(seq 50); do "$B" $S volume list >/dev/null 2>&1 && break; sleep 0.1; done
"$B" $S volume create hb replica 3 $IP:"$D/b1" $IP:"$D/b2" $IP:"$D/b3" force >/dev/null
"$B" $S volume start hb >/dev/null
"$B" $S volume set hb network.ping-timeout 2 >/dev/null
"$B" mount --port $P $IP:/hb "$D/mnt" --log-file "$D/client.log"
sleep 1

BRICK=$("$B" $S --json volume status hb | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["bricks"][2]["pid"])')
kill -STOP "$BRICK"
echo "brick 3 frozen; writing $FILES files, $MIB MiB in all ..."
python3 - "$D/mnt" "$FILES" "$MIB" "$PER_DIR" <<'PY'
import os, sys, time
root, n, mib, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
size = mib * 1048576 // n
block = os.urandom(1 << 20)
t = time.time()
for i in range(n):
    d = os.path.join(root, f"d{i // per}")
    if i % per == 0:
        os.makedirs(d, exist_ok=True)
    if size < len(block):
        off = (i * 4096) % (len(block) - size)
        data = block[off:off + size]
    else:
        data = os.urandom(size)
    with open(os.path.join(d, f"f{i}"), "wb") as f:
        f.write(data)
print(f"written in {time.time() - t:.1f} s")
PY
kill -CONT "$BRICK"
BRICK=
# Timed from the brick's return: the healer starts by itself within seconds.
start=$(date +%s.%N)
# Wait for the healer to see the brick again, then ask for a heal now.
for _ in $(seq 100); do
    [ "$("$B" $S --json volume heal hb info | python3 -c 'import json,sys; print(all(b["connected"] for b in json.load(sys.stdin)["bricks"]))')" = True ] && break
    sleep 0.2
done
pending=$("$B" $S --json volume heal hb info | python3 -c 'import json,sys; print(sum(len(b["entries"]) for b in json.load(sys.stdin)["bricks"]))')
echo "pending heal entries when the brick was back: $pending"
"$B" $S volume heal hb >/dev/null
"$B" $S volume heal hb --wait
end=$(date +%s.%N)
python3 - "$start" "$end" "$FILES" "$MIB" <<'PY'
import sys
s, e, n, mib = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t = e - s
print(f"healed {n} files, {mib} MiB in {t:.1f} s: {mib * 1.048576 / t:.1f} MB/s, {n / t:.0f} files/s")
PY
diff <(cd "$D/b1" && find . -path ./.mortar -prune -o -type f -print0 | sort -z | xargs -0 md5sum) \
     <(cd "$D/b3" && find . -path ./.mortar -prune -o -type f -print0 | sort -z | xargs -0 md5sum) >/dev/null \
    && echo "brick 3 holds the same files as brick 1" || { echo "brick 3 differs from brick 1"; exit 1; }
"$B" $S --json volume heal hb statistics | python3 -c '
import json, sys
c = json.load(sys.stdin)["crawls"]
t = lambda k: sum(x[k] for x in c)
print("crawls:", len(c), "entries healed:", t("healed"), "names made:", t("entries"), "bytes copied:", t("bytes"), "failed:", t("failed"))'
