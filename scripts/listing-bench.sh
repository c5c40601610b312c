#!/usr/bin/env bash
# Listing benchmark (mortar): a distribute volume of BRICKS bricks with one
# directory of FILES empty files; prints the median seconds of three
# `ls -f` (names only) and three `ls -l` (names and attributes) of it.
#
#   MORTAR=target/release/mortar BRICKS=8 FILES=20000 scripts/listing-bench.sh
set -euo pipefail
MORTAR=${MORTAR:-mortar}
ROOT=${ROOT:-/var/tmp/mortar-list-bench}
BRICKS=${BRICKS:-8}
FILES=${FILES:-20000}
PORT=24213
M="$MORTAR --server 127.0.0.1:$PORT"

cleanup() {
    umount -l "$ROOT/mnt" 2>/dev/null || true
    pkill -f "state-dir $ROOT/state" 2>/dev/null || true
    pkill -f "mortar[- ]brick .*$ROOT/" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
rm -rf "$ROOT"
mkdir -p "$ROOT/mnt"
export MORTAR_CREDENTIAL=$ROOT/state/tls/admin.pem
nohup $MORTAR daemon --listen 127.0.0.1:$PORT --state-dir "$ROOT/state" >"$ROOT/daemon.log" 2>&1 &
for _ in $(seq 50); do $M volume list >/dev/null 2>&1 && break; sleep 0.1; done
bricks=()
for i in $(seq 1 "$BRICKS"); do bricks+=("127.0.0.1:$ROOT/b$i"); done
$M volume create lb "${bricks[@]}" force >/dev/null
$M volume start lb >/dev/null
$MORTAR mount --port $PORT 127.0.0.1:/lb "$ROOT/mnt"
mkdir "$ROOT/mnt/d"
(cd "$ROOT/mnt/d" && seq 1 "$FILES" | sed 's/^/f/' | xargs touch)

median() { sort -n | sed -n 2p; }
timed() {
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t1=$(date +%s.%N)
    echo "$t0 $t1" | awk '{ printf "%.3f\n", $2 - $1 }'
}
names=$(for _ in 1 2 3; do timed ls -f "$ROOT/mnt/d"; done | median)
long=$(for _ in 1 2 3; do timed ls -l "$ROOT/mnt/d"; done | median)
listed=$(ls -f "$ROOT/mnt/d" | grep -c '^f')
echo "bricks $BRICKS, files $FILES (listed $listed): ls -f ${names} s, ls -l ${long} s"
