#!/bin/bash
# Rebuild speed of a brick replaced empty: a `disperse 6 redundancy 2`
# volume on this host; FILES files of MIB MiB in all are written through
# the mount; brick 6 is replaced by an empty directory (`replace-brick …
# commit force`), and the time from then until the full heal has completed
# and nothing is left to heal is the rebuild time. The new brick must then
# hold, file by file, what the old one held.
#
# The figure to compare with the disk: the new brick receives MIB / 4 MiB
# (one fragment of each file), rebuilt from 4 of the other 5.
#
# `scripts/replace-heal-bench.sh glusterfs` does the same with GlusterFS
# (glusterd running here, `gluster volume replace-brick … commit force`,
# done when `gluster volume heal V info` lists nothing), for comparison.
#
# With LOAD_MIB=N, a client writes a new file of N MiB through the mount
# (`dd … conv=fsync`) as soon as the rebuild starts, and its speed is
# reported: what the rebuild leaves the clients. PRIORITY=off (mortar) sets
# `performance.enable-least-priority off` first, for the comparison.
#
# Usage: scripts/replace-heal-bench.sh [mortar|glusterfs]   (env: MORTAR=path/to/mortar DIR=/var/tmp/mortar-rebuild FILES=8 MIB=8192 LOAD_MIB= PRIORITY=)
set -euo pipefail
SYSTEM=${1:-mortar}

write_files() {
    echo "writing $FILES files, $MIB MiB in all ..."
    local t
    t=$(date +%s.%N)
    for i in $(seq "$FILES"); do
        head -c $((MIB * 1048576 / FILES)) /dev/urandom >"$1/f$i"
    done
    sync
    echo "written in $(python3 -c "import time; print(f'{time.time() - $t:.1f}')") s"
}

# A client's write of LOAD_MIB MiB into directory $1, in the background,
# while the rebuild runs; `load_report` waits for it and prints its speed.
load_start() {
    [ -n "${LOAD_MIB:-}" ] || return 0
    (dd if=/dev/zero of="$1/load" bs=1M count="$LOAD_MIB" conv=fsync 2>&1 | tail -1 >"$D/load.out") &
    LOAD_PID=$!
}
load_report() {
    [ -n "${LOAD_MIB:-}" ] || return 0
    wait "$LOAD_PID"
    echo "a client's write of $LOAD_MIB MiB during the rebuild: $(sed 's/.*copied, //' "$D/load.out")"
}

report() {
    python3 - "$1" "$2" "$3" <<'PY'
import sys
s, e, mib = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
t = e - s
print(f"rebuilt {mib} MiB of fragments in {t:.1f} s: {mib * 1.048576 / t:.1f} MB/s written to the new brick")
PY
}

# Whether brick $2 holds, file by file, what brick $1 held (its own
# directory $3 and the load written since left out).
same_files() {
    diff <(cd "$1" && find . -path "./$3" -prune -o -path ./load -prune -o -type f -print0 | sort -z | xargs -0 md5sum) \
         <(cd "$2" && find . -path "./$3" -prune -o -path ./load -prune -o -type f -print0 | sort -z | xargs -0 md5sum) >/dev/null \
        && echo "the new brick holds what the old one held" || { echo "the new brick differs from the old one"; exit 1; }
}

# How many files a brick holds outside its own directory $2 (and the
# load's file), and their total length in bytes.
fragments() {
    find "$1" \( -path "$1/$2" -o -path "$1/load" \) -prune -o -type f -printf '%s\n' 2>/dev/null \
        | awk '{n++; b += $1} END {print n + 0, b + 0}'
}

if [ "$SYSTEM" = glusterfs ]; then
    G="gluster --mode=script"
    D=${DIR:-/var/tmp/glusterfs-rebuild}
    FILES=${FILES:-8}
    MIB=${MIB:-8192}
    H=$(hostname)
    pgrep -x glusterd >/dev/null || glusterd
    gcleanup() {
        umount -l "$D/mnt" 2>/dev/null || true
        $G volume stop grb force >/dev/null 2>&1 || true
        $G volume delete grb >/dev/null 2>&1 || true
    }
    trap gcleanup EXIT
    gcleanup
    rm -rf "$D" && mkdir -p "$D/mnt"
    $G volume create grb disperse 6 redundancy 2 $(for i in 1 2 3 4 5 6; do echo "$H:$D/b$i"; done) force >/dev/null
    $G volume start grb >/dev/null
    mount -t glusterfs "$H:/grb" "$D/mnt"
    write_files "$D/mnt"
    held=$(du -sm --exclude=.glusterfs "$D/b6" | cut -f1)
    want=$(fragments "$D/b6" .glusterfs)
    echo "brick 6 holds $held MiB of fragments; replacing it by an empty one ..."
    sync && echo 3 >/proc/sys/vm/drop_caches
    start=$(date +%s.%N)
    $G volume replace-brick grb "$H:$D/b6" "$H:$D/b6new" commit force >/dev/null
    # As GlusterFS's documents advise for a dispersed volume (mortar's
    # replace-brick starts its full heal itself).
    $G volume heal grb full >/dev/null
    load_start "$D/mnt"
    for _ in $(seq 72000); do
        info=$($G volume heal grb info 2>/dev/null || true)
        left=$(echo "$info" | awk '/^Number of entries:/ {n += $4} END {print n + 0}')
        listed=$(echo "$info" | grep -c '^Number of entries:' || true)
        # Its files and their lengths, not their blocks: a healed
        # fragment need not take the blocks the written one took, so
        # `du` of many small files may never reach the old brick's.
        has=$(fragments "$D/b6new" .glusterfs)
        [ "$listed" -ge 6 ] && [ "$left" = 0 ] && [ "$has" = "$want" ] && break
        sleep 0.5
    done
    end=$(date +%s.%N)
    report "$start" "$end" "$held"
    load_report
    same_files "$D/b6" "$D/b6new" .glusterfs
    exit 0
fi

B=${MORTAR:-mortar}
D=${DIR:-/var/tmp/mortar-rebuild}
FILES=${FILES:-8}
MIB=${MIB:-8192}
IP=127.0.0.10
P=24176
S="--server $IP:$P"

cleanup() {
    umount -l "$D/mnt" 2>/dev/null || true
    pkill -f "state-dir $D/state" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
rm -rf "$D" && mkdir -p "$D"/{b1,b2,b3,b4,b5,b6,mnt}
export MORTAR_CREDENTIAL=$D/state/tls/admin.pem
"$B" daemon --listen $IP:$P --host $IP --state-dir "$D/state" >"$D/daemon.log" 2>&1 &
for _ in $(seq 50); do "$B" $S volume list >/dev/null 2>&1 && break; sleep 0.1; done
"$B" $S volume create rb disperse 6 redundancy 2 $(for i in 1 2 3 4 5 6; do echo $IP:"$D/b$i"; done) force >/dev/null
"$B" $S volume start rb >/dev/null
"$B" mount --port $P $IP:/rb "$D/mnt" --log-file "$D/client.log"
sleep 1
[ "${PRIORITY:-on}" = off ] && "$B" $S volume set rb performance.enable-least-priority off >/dev/null

write_files "$D/mnt"
held=$(du -sm --exclude=.mortar "$D/b6" | cut -f1)
echo "brick 6 holds $held MiB of fragments; replacing it by an empty one ..."
mkdir -p "$D/b6new"
# Through the page cache of neither side: what the disks do.
sync && echo 3 >/proc/sys/vm/drop_caches
start=$(date +%s.%N)
"$B" $S volume replace-brick rb $IP:"$D/b6" $IP:"$D/b6new" commit force >/dev/null
load_start "$D/mnt"
for _ in $(seq 36000); do
    done=$("$B" $S --json volume info rb | python3 -c '
import json, sys
v = json.load(sys.stdin)[0]
print(any(t["kind"] == "HealFull" and t["status"] == "Completed" for t in v.get("tasks", [])))')
    if [ "$done" = True ]; then
        pending=$("$B" $S --json volume heal rb info | python3 -c 'import json,sys; print(sum(len(b["entries"]) for b in json.load(sys.stdin)["bricks"]))')
        [ "$pending" = 0 ] && break
    fi
    sleep 0.5
done
end=$(date +%s.%N)
report "$start" "$end" "$held"
load_report
same_files "$D/b6" "$D/b6new" .mortar
