#!/bin/bash
# Brick requests per file operation, as the client counts them
# (`trusted.mortar.client.requests`): one mount of a replica-3 volume on
# this host, N files of 4 KiB, each operation done on every file.
#
#   scripts/requests-per-op.sh [MORTAR_BINARY] [N]
#
# OPTS="key=value ..." sets volume options first; the time each step took
# (ms per file, one process per file: the tools' own start is in it) is
# shown beside the requests. FOPS=1 adds which fops the brick requests
# were (the client's debug log of every request it sends). SETS=K makes
# the volume K replica sets (3K bricks) under distribute, to see whether
# a file's requests grow with the bricks.
# Starts a private daemon (port 24197) under a temporary directory and
# removes everything it made when done.
set -euo pipefail
MORTAR=${1:-$(dirname "$0")/../target/release/mortar}
N=${2:-100}
PORT=24197
work=$(mktemp -d /var/tmp/mortar-requests.XXXXXX)
mnt=$work/mnt
cleanup() {
    umount -l "$mnt" 2>/dev/null || true
    [ -n "${daemon:-}" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
[ -z "${KEEP:-}" ] || trap - EXIT
export MORTAR_CREDENTIAL=$work/state/tls/admin.pem
"$MORTAR" daemon --listen 127.0.0.1:$PORT --host 127.0.0.1 --state-dir "$work/state" >"$work/daemon.log" 2>&1 &
daemon=$!
m() { "$MORTAR" --server 127.0.0.1:$PORT "$@" >/dev/null; }
for _ in $(seq 100); do m volume list 2>/dev/null && break; sleep 0.1; done
bricks=()
for b in $(seq $((3 * ${SETS:-1}))); do bricks+=("127.0.0.1:$work/b$b"); done
m volume create rq replica 3 "${bricks[@]}" force
for kv in ${OPTS:-}; do m volume set rq "${kv%%=*}" "${kv#*=}"; done
m volume start rq
mkdir -p "$mnt"
if [ -n "${FOPS:-}" ]; then
    MORTAR_LOG=mortar_protocol::client=debug "$MORTAR" mount --port $PORT -o log-file="$work/mount.log" 127.0.0.1:/rq "$mnt"
else
    "$MORTAR" mount --port $PORT 127.0.0.1:/rq "$mnt"
fi
sent() { grep ' sent' "$work/mount.log" 2>/dev/null | grep -o 'fop="[a-z_]*' | tr -d '"' || true; }
fops() { sent | wc -l; }
count() { getfattr --absolute-names --only-values -n trusted.mortar.client.requests "$mnt"; }
mkdir "$mnt/d"
block=$(head -c 4096 /dev/zero | tr '\0' x)
# Each step: what it does to file $i.
declare -a names=(
    "create + write 4 KiB + close"
    "stat"
    "read 4 KiB again"
    "open, pwrite 4 KiB, close"
    "append 4 KiB"
    "rename"
    "delete"
)
step() {
    case $1 in
    0) printf '%s' "$block" >"$mnt/d/f$2" ;;
    1) stat "$mnt/d/f$2" >/dev/null ;;
    2) cat "$mnt/d/f$2" >/dev/null ;;
    3) printf '%s' "$block" | dd of="$mnt/d/f$2" bs=4096 iflag=fullblock conv=notrunc status=none ;;
    4) printf '%s' "$block" >>"$mnt/d/f$2" ;;
    5) mv "$mnt/d/f$2" "$mnt/d/g$2" ;;
    6) rm "$mnt/d/g$2" ;;
    esac
}
echo "| operation | brick requests per file | ms per file |${FOPS:+ fops (all files) |}"
echo "|---|---|---|${FOPS:+---|}"
for s in $(seq 0 6); do
    sleep 0.5 # let the last step's background requests (release) end
    before=$(count)
    seen=0
    [ -z "${FOPS:-}" ] || seen=$(fops)
    t0=$(date +%s%N)
    for i in $(seq "$N"); do step "$s" "$i"; done
    t1=$(date +%s%N)
    sleep 0.5
    after=$(count)
    which=""
    if [ -n "${FOPS:-}" ]; then
        which=" $(sent | tail -n +$((seen + 1)) | sort | uniq -c | awk '{sub(/fop=/, "", $2); printf "%s %s, ", $2, $1}') |"
    fi
    echo "| ${names[$s]} | $(echo "scale=1; ($after - $before) / $N" | bc) | $(echo "scale=2; ($t1 - $t0) / 1000000 / $N" | bc) |$which"
done
