#!/bin/bash
# POSIX conformance of a mortar volume: builds pjdfstest from the source
# snapshot in ../shared/suites (or $SUITES), starts a daemon of its own on a
# loopback address, creates and mounts a replica-3 volume of three bricks,
# runs the suite as root in a directory of the mount, and prints the counts
# (and the failed tests) as a Markdown table row.
#
# Usage: scripts/conformance.sh [--keep]
#   env: SUITES=dir with pjdfstest.tar.gz, WORK=scratch dir, MORTAR=binary,
#        OUT=file to append the summary to
# --keep leaves the volume mounted and the daemon running for a look.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SUITES=${SUITES:-$ROOT/../shared/suites}
[ -e "$SUITES/pjdfstest.tar.gz" ] || SUITES=/work/shared/suites
WORK=${WORK:-$(mktemp -d /tmp/mortar-conformance.XXXXXX)}
KEEP=0
[ "${1:-}" = "--keep" ] && KEEP=1
IP=127.0.77.1
PORT=24198

need=()
command -v autoreconf >/dev/null || need+=(autoconf automake libtool)
command -v prove >/dev/null || need+=(perl)
command -v fusermount3 >/dev/null || need+=(fuse3)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ -z "${MORTAR:-}" ]; then
    cargo build --release --quiet
    MORTAR=$ROOT/target/release/mortar
fi

# --- pjdfstest, built once per scratch directory ---
PJD=$WORK/pjdfstest
if [ ! -x "$PJD/pjdfstest" ]; then
    mkdir -p "$WORK"
    tar -xzf "$SUITES/pjdfstest.tar.gz" -C "$WORK"
    (cd "$PJD" && autoreconf -ifs >/dev/null 2>&1 && ./configure -q >/dev/null && make -s pjdfstest >/dev/null 2>&1)
fi

# --- a daemon and a replica-3 volume of our own ---
STATE=$WORK/state
MNT=$WORK/mnt
umount -l "$MNT" 2>/dev/null || true
rm -rf "$STATE" "$WORK/b1" "$WORK/b2" "$WORK/b3"
mkdir -p "$STATE" "$MNT" "$WORK/b1" "$WORK/b2" "$WORK/b3"
cli() { "$MORTAR" --server $IP:$PORT "$@"; }
"$MORTAR" daemon --listen $IP:$PORT --host $IP --state-dir "$STATE" >>"$WORK/daemon.log" 2>&1 &
DAEMON=$!
cleanup() {
    [ $KEEP = 1 ] && { echo "kept: mount $MNT, daemon pid $DAEMON"; return; }
    umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
    kill $DAEMON 2>/dev/null || true
    wait $DAEMON 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 100); do cli volume list >/dev/null 2>&1 && break; sleep 0.1; done
cli volume create pjd replica 3 transport tcp $IP:$WORK/b1 $IP:$WORK/b2 $IP:$WORK/b3 force >/dev/null
cli volume start pjd >/dev/null
"$MORTAR" mount --port $PORT $IP:/pjd "$MNT" --log-file "$WORK/client.log"

# --- the suite, as its README says: prove -r, as root, inside the mount ---
mkdir -p "$MNT/pjd"
LOG=$WORK/pjdfstest.log
set +e
(cd "$MNT/pjd" && prove -r "$PJD/tests") >"$LOG" 2>&1
set -e
summary=$(grep -E '^Files=' "$LOG" || echo "Files=?, Tests=?")
result=$(grep -E '^Result:' "$LOG" || echo "Result: ?")
tests=$(echo "$summary" | sed -E 's/.*Tests=([0-9]+).*/\1/')
# "Failed N/M subtests" per file; their sum is the failed subtest count.
failed=$(grep -E 'Failed [0-9]+/[0-9]+ subtests' "$LOG" | sed -E 's/.*Failed ([0-9]+)\/.*/\1/' | paste -sd+ | bc 2>/dev/null || true)
failed=${failed:-0}
files=$(grep -E 'Wstat: [0-9]+ Tests: [0-9]+ Failed: [1-9]' "$LOG" | grep -oE 'tests/[a-z_]+/[0-9]+\.t' | sort -u | paste -sd' ' || true)
echo "pjdfstest: $tests subtests, $failed failed ($result)"
[ -n "$files" ] && echo "failed: $files"
echo "log: $LOG"
if [ -n "${OUT:-}" ]; then
    echo "| mortar $(git rev-parse --short HEAD) replica 3 | $tests | $failed | ${files:-none} |" >>"$OUT"
fi
