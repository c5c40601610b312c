#!/usr/bin/env bash
# Rebalance benchmark (mortar): a distribute volume of two bricks, filled
# with FILES small files of KB KiB and BIG files of BIGMB MiB, grows by one
# brick and is rebalanced while a foreground writer runs. Prints how long
# the rebalance took, what it moved (files/s, MB/s) and the foreground
# writer's MB/s before and during it.
#
#   MORTAR=target/release/mortar scripts/rebalance-bench.sh
set -euo pipefail
MORTAR=${MORTAR:-mortar}
ROOT=${ROOT:-/var/tmp/mortar-rebal-bench}
FILES=${FILES:-2000}
KB=${KB:-64}
BIG=${BIG:-4}
BIGMB=${BIGMB:-64}
THROTTLE=${THROTTLE:-normal}
PORT=24211
M="$MORTAR --server 127.0.0.1:$PORT"

cleanup() {
    umount -l "$ROOT/mnt" 2>/dev/null || true
    pkill -f "state-dir $ROOT/state" 2>/dev/null || true
    pkill -f "mortar-brick --path $ROOT/" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
rm -rf "$ROOT"
mkdir -p "$ROOT/mnt"
nohup $MORTAR daemon --listen 127.0.0.1:$PORT --state-dir "$ROOT/state" >"$ROOT/daemon.log" 2>&1 &
for _ in $(seq 50); do $M volume list >/dev/null 2>&1 && break; sleep 0.1; done
$M volume create rb 127.0.0.1:$ROOT/b1 127.0.0.1:$ROOT/b2 force >/dev/null
$M volume start rb >/dev/null
$M volume set rb cluster.rebal-throttle "$THROTTLE" >/dev/null
$MORTAR mount --port $PORT 127.0.0.1:/rb "$ROOT/mnt"
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

$M volume add-brick rb 127.0.0.1:$ROOT/b3 force >/dev/null
t0=$(date +%s.%N)
$M volume rebalance rb start >/dev/null
during=()
while [[ $($M volume rebalance rb status) == *"in progress"* ]]; do
    during+=("$(fg_mbs)")
done
t1=$(date +%s.%N)
status=$($M --json volume rebalance rb status)
moved=$(echo "$status" | sed -n 's/.*"moved": \([0-9]*\).*/\1/p')
bytes=$(echo "$status" | sed -n 's/.*"bytes": \([0-9]*\).*/\1/p')
state=$(echo "$status" | sed -n 's/.*"status": "\([A-Za-z]*\)".*/\1/p')
secs=$(echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }')
dmed=$(printf '%s\n' "${during[@]:-}" | grep . | sort -n | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print "n/a" }')
echo "| throttle | files | data | rebalance | moved | files/s | MB/s | foreground MB/s before | during (median of ${#during[@]}) |"
echo "|---|---|---|---|---|---|---|---|---|"
total=$(( (FILES * KB) / 1024 + BIG * BIGMB ))
echo "$THROTTLE $((FILES + BIG)) $total $secs $moved $bytes $before $dmed $state" | awk '{
    printf "| %s | %d | %d MiB | %s s (%s) | %d files, %.0f MiB | %.0f | %.1f | %s | %s |\n",
        $1, $2, $3, $4, $9, $5, $6 / 1048576, $5 / $4, $6 / 1048576 / $4, $7, $8 }'
