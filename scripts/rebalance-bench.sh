#!/usr/bin/env bash
# Rebalance benchmark (mortar, or GlusterFS with SYSTEM=glusterfs): a
# distribute volume of two bricks, filled
# with FILES small files of KB KiB and BIG files of BIGMB MiB, grows by one
# brick and is rebalanced while a foreground writer runs. Prints how long
# the rebalance took, what it moved (files/s, MB/s) and the foreground
# writer's MB/s before and during it.
#
#   MORTAR=target/release/mortar scripts/rebalance-bench.sh
#   SYSTEM=glusterfs scripts/rebalance-bench.sh   (apt-get install glusterfs-server)
set -euo pipefail
MORTAR=${MORTAR:-mortar}
ROOT=${ROOT:-/var/tmp/mortar-rebal-bench}
FILES=${FILES:-2000}
KB=${KB:-64}
BIG=${BIG:-4}
BIGMB=${BIGMB:-64}
THROTTLE=${THROTTLE:-normal}
SYSTEM=${SYSTEM:-mortar}
PORT=24211
M="$MORTAR --server 127.0.0.1:$PORT"
G="gluster --mode=script"
HOST=$(hostname)
VOL=rb

cleanup() {
    umount -l "$ROOT/mnt" 2>/dev/null || true
    if [[ $SYSTEM == glusterfs ]]; then
        $G volume stop $VOL force >/dev/null 2>&1 || true
        $G volume delete $VOL >/dev/null 2>&1 || true
    fi
    pkill -f "state-dir $ROOT/state" 2>/dev/null || true
    pkill -f "mortar[- ]brick .*$ROOT/" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
rm -rf "$ROOT"
mkdir -p "$ROOT/mnt"
case $SYSTEM in
mortar)
    export MORTAR_CREDENTIAL=$ROOT/state/tls/admin.pem
    nohup $MORTAR daemon --listen 127.0.0.1:$PORT --state-dir "$ROOT/state" >"$ROOT/daemon.log" 2>&1 &
    for _ in $(seq 50); do $M volume list >/dev/null 2>&1 && break; sleep 0.1; done
    $M volume create $VOL 127.0.0.1:$ROOT/b1 127.0.0.1:$ROOT/b2 force >/dev/null
    $M volume start $VOL >/dev/null
    $M volume set $VOL cluster.rebal-throttle "$THROTTLE" >/dev/null
    $MORTAR mount --port $PORT 127.0.0.1:/$VOL "$ROOT/mnt"
    add_brick() { $M volume add-brick $VOL 127.0.0.1:$ROOT/b3 force >/dev/null; }
    rebalance() { $M volume rebalance $VOL "$@"; }
    ;;
glusterfs)
    pgrep -x glusterd >/dev/null || glusterd
    for _ in $(seq 100); do $G volume list >/dev/null 2>&1 && break; sleep 0.2; done
    $G volume create $VOL transport tcp $HOST:$ROOT/b1 $HOST:$ROOT/b2 force >/dev/null
    $G volume start $VOL >/dev/null
    $G volume set $VOL cluster.rebal-throttle "$THROTTLE" >/dev/null
    mount -t glusterfs $HOST:/$VOL "$ROOT/mnt"
    add_brick() { $G volume add-brick $VOL $HOST:$ROOT/b3 force >/dev/null; }
    rebalance() { $G volume rebalance $VOL "$@"; }
    ;;
*)
    echo "SYSTEM is mortar or glusterfs" >&2
    exit 2
    ;;
esac
mnt=$ROOT/mnt
mkdir -p "$mnt/small" "$mnt/big" "$mnt/fg"
for i in $(seq 1 "$FILES"); do head -c "${KB}K" /dev/urandom >"$mnt/small/f$i"; done
for i in $(seq 1 "$BIG"); do head -c "${BIGMB}M" /dev/urandom >"$mnt/big/b$i"; done
sync

# The foreground load: 64 MiB written and fsynced, again and again.
fg_mbs() {
    dd if=/dev/zero of="$mnt/fg/w" bs=1M count=64 conv=fsync 2>&1 |
        awk '/copied/ { for (i = 1; i <= NF; i++) if ($i ~ /^MB\/s|^GB\/s/) { v = $(i-1); if ($i ~ /GB/) v *= 1000; print v } }'
}
before=$(for _ in 1 2 3; do fg_mbs; done | sort -n | sed -n 2p)

add_brick
t0=$(date +%s.%N)
rebalance start >/dev/null
during=()
sleep 0.2
while [[ $(rebalance status) == *"in progress"* ]]; do
    during+=("$(fg_mbs)")
done
t1=$(date +%s.%N)
state=$(rebalance status | grep -Eo 'completed|failed|stopped' | head -1)
# What reached the new brick: its files with data (pointers, the systems'
# own directories and the foreground writer's file left out).
read -r moved bytes < <(find "$ROOT/b3" \( -path "$ROOT/b3/.glusterfs" -o -path "$ROOT/b3/.mortar" -o -path "$ROOT/b3/fg" \) -prune \
    -o -type f ! -perm 1000 -printf '%s\n' | awk '{ n++; b += $1 } END { print n + 0, b + 0 }')
secs=$(echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }')
dmed=$(printf '%s\n' "${during[@]:-}" | grep . | sort -n | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print "n/a" }')
echo "| system | throttle | files | data | rebalance | moved | files/s | MB/s | foreground MB/s before | during (median of ${#during[@]}) |"
echo "|---|---|---|---|---|---|---|---|---|---|"
total=$(( (FILES * KB) / 1024 + BIG * BIGMB ))
echo "$SYSTEM $THROTTLE $((FILES + BIG)) $total $secs $moved $bytes $before $dmed $state" | awk '{
    printf "| %s | %s | %d | %d MiB | %s s (%s) | %d files, %.0f MiB | %.0f | %.1f | %s | %s |\n",
        $1, $2, $3, $4, $5, $10, $6, $7 / 1048576, $6 / $5, $7 / 1048576 / $5, $8, $9 }'
