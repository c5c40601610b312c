#!/bin/bash
# Heal time of a large file of which a little changed while a brick was
# away (granular heal): a `disperse 6 redundancy 2` volume on this host,
# one brick process per brick; a file of MIB MiB is written through the
# mount, brick 6 is stopped (`volume reset-brick V B start`), CHANGES
# writes of 4 KiB land at random places of the file, the brick is brought
# back (`reset-brick V B B commit force`, which starts a full heal), and
# the time from then until nothing is left to heal is the heal time. The
# file must
# then read back as written, also with two data bricks away (brick 6's
# fragment is read then).
#
# `scripts/changed-heal-bench.sh glusterfs` does the same with GlusterFS
# (its brick process stopped by `kill`, brought back by `volume start V
# force`, done when `volume heal V info` lists nothing).
#
# Usage: scripts/changed-heal-bench.sh [mortar|glusterfs]   (env: MORTAR=path/to/mortar DIR=/var/tmp/mortar-changed MIB=1024 CHANGES=16)
set -euo pipefail
SYSTEM=${1:-mortar}
MIB=${MIB:-1024}
CHANGES=${CHANGES:-16}

# Writes CHANGES blocks of 4 KiB at random offsets of file $1 (seeded, so
# both systems get the same), and prints nothing.
change() {
    python3 - "$1" "$CHANGES" "$MIB" <<'PY'
import os, random, sys
path, n, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(7)
fd = os.open(path, os.O_WRONLY)
for _ in range(n):
    os.pwrite(fd, r.randbytes(4096), r.randrange(0, mib * 1048576 - 4096))
os.fsync(fd)
os.close(fd)
PY
}

report() {
    python3 -c "import sys; print(f'healed in {float(sys.argv[2]) - float(sys.argv[1]):.1f} s')" "$1" "$2"
}

if [ "$SYSTEM" = glusterfs ]; then
    G="gluster --mode=script"
    D=${DIR:-/var/tmp/glusterfs-changed}
    H=$(hostname)
    pgrep -x glusterd >/dev/null || glusterd
    gcleanup() {
        umount -l "$D/mnt" 2>/dev/null || true
        $G volume stop gch force >/dev/null 2>&1 || true
        $G volume delete gch >/dev/null 2>&1 || true
    }
    trap gcleanup EXIT
    gcleanup
    rm -rf "$D" && mkdir -p "$D/mnt"
    $G volume create gch disperse 6 redundancy 2 $(for i in 1 2 3 4 5 6; do echo "$H:$D/b$i"; done) force >/dev/null
    $G volume start gch >/dev/null
    mount -t glusterfs "$H:/gch" "$D/mnt"
    head -c $((MIB << 20)) /dev/urandom >"$D/mnt/f"
    sum=$(md5sum <"$D/mnt/f")
    pid=$($G volume status gch "$H:$D/b6" | awk '/^Brick/ {print $NF}')
    kill "$pid"
    sleep 2
    change "$D/mnt/f"
    sum=$(md5sum <"$D/mnt/f")
    sync && echo 3 >/proc/sys/vm/drop_caches
    start=$(date +%s.%N)
    $G volume start gch force >/dev/null
    for _ in $(seq 72000); do
        info=$($G volume heal gch info 2>/dev/null || true)
        left=$(echo "$info" | awk '/^Number of entries:/ {n += $4} END {print n + 0}')
        listed=$(echo "$info" | grep -c '^Number of entries:' || true)
        [ "$listed" -ge 6 ] && [ "$left" = 0 ] && break
        sleep 0.2
    done
    end=$(date +%s.%N)
    report "$start" "$end"
    [ "$(md5sum <"$D/mnt/f")" = "$sum" ] && echo "the file reads back as written" || { echo "the file differs"; exit 1; }
    exit 0
fi

B=${MORTAR:-mortar}
D=${DIR:-/var/tmp/mortar-changed}
IP=127.0.0.12
P=24178
S="--server $IP:$P"

cleanup() {
    umount -l "$D/mnt" 2>/dev/null || true
    pkill -f "state-dir $D/state" 2>/dev/null || true
    pkill -f -- "--path $D/b" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
rm -rf "$D" && mkdir -p "$D"/{b1,b2,b3,b4,b5,b6,mnt}
export MORTAR_CREDENTIAL=$D/state/tls/admin.pem
"$B" daemon --listen $IP:$P --host $IP --state-dir "$D/state" >"$D/daemon.log" 2>&1 &
for _ in $(seq 50); do "$B" $S volume list >/dev/null 2>&1 && break; sleep 0.1; done
"$B" $S volume set all cluster.brick-multiplex off >/dev/null
"$B" $S volume create ch disperse 6 redundancy 2 $(for i in 1 2 3 4 5 6; do echo $IP:"$D/b$i"; done) force >/dev/null
"$B" $S volume start ch >/dev/null
"$B" mount --port $P $IP:/ch "$D/mnt" --log-file "$D/client.log"
sleep 1
head -c $((MIB << 20)) /dev/urandom >"$D/mnt/f"
# The writer's change sessions end (its lock is kept half a second).
sleep 2
brick_pid() {
    "$B" $S --json volume status ch | python3 -c '
import json, sys
d = json.load(sys.stdin)
for v in d if isinstance(d, list) else [d]:
    for b in v["bricks"]:
        if b["brick"].endswith("/" + sys.argv[1]):
            print(b["pid"])' "$1"
}
B6=$IP:$D/b6
"$B" $S volume reset-brick ch "$B6" start >/dev/null
pending() {
    "$B" $S --json volume heal ch info | python3 -c 'import json,sys; print(sum(len(b["entries"]) for b in json.load(sys.stdin)["bricks"]))'
}
change "$D/mnt/f"
sum=$(md5sum <"$D/mnt/f")
echo "entries to heal with brick 6 away: $(pending)"
# Through the page cache of neither side: what the disks do.
sync && echo 3 >/proc/sys/vm/drop_caches
start=$(date +%s.%N)
"$B" $S volume reset-brick ch "$B6" "$B6" commit force >/dev/null
for _ in $(seq 72000); do
    [ "$(pending)" = 0 ] && break
    sleep 0.2
done
end=$(date +%s.%N)
report "$start" "$end"
[ "$(md5sum <"$D/mnt/f")" = "$sum" ] && echo "the file reads back as written" || { echo "the file differs"; exit 1; }
# Brick 6's fragment is checked by reading the file with two data bricks
# away, through a new mount, caches dropped.
umount "$D/mnt"
for b in b1 b2; do
    kill -9 "$(brick_pid $b)"
done
sync && echo 3 >/proc/sys/vm/drop_caches
"$B" mount --port $P $IP:/ch "$D/mnt" --log-file "$D/client2.log"
sleep 1
[ "$(md5sum <"$D/mnt/f")" = "$sum" ] && echo "it reads back as written with bricks 1 and 2 away: brick 6 was healed" || { echo "it differs with bricks 1 and 2 away"; exit 1; }
