#!/bin/bash
# What the trash costs a removal: a replica-3 volume on this host; FILES
# small files in DIRS directories made through the mount, then removed
# with `rm -rf`, with features.trash off and then on (each run on files
# made afresh). Prints the time of each removal.
#
# Usage: scripts/trash-bench.sh   (env: MORTAR=path/to/mortar DIR=/var/tmp/mortar-trash FILES=5000 DIRS=50)
set -euo pipefail
B=${MORTAR:-mortar}
D=${DIR:-/var/tmp/mortar-trash}
FILES=${FILES:-5000}
DIRS=${DIRS:-50}
IP=127.0.0.9
P=24178
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
for _ in $(seq 50); do "$B" $S volume list >/dev/null 2>&1 && break; sleep 0.1; done
"$B" $S volume create tb replica 3 $IP:"$D/b1" $IP:"$D/b2" $IP:"$D/b3" force >/dev/null
"$B" $S volume start tb >/dev/null
"$B" mount --port $P $IP:/tb "$D/mnt" --log-file "$D/client.log"
make() {
    python3 - "$D/mnt/t" "$FILES" "$DIRS" <<'PY'
import os, sys
root, n, dirs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    d = os.path.join(root, f"d{i % dirs}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}"), "wb") as f:
        f.write(b"x" * 1024)
PY
    sync
}
for trash in off on; do
    "$B" $S volume set tb features.trash $trash >/dev/null
    sleep 2
    make
    t0=$(date +%s.%N)
    rm -rf "$D/mnt/t"
    t1=$(date +%s.%N)
    echo "features.trash $trash: rm -rf of $FILES files in $DIRS directories: $(python3 -c "print(f'{$t1 - $t0:.2f}')") s"
done
echo "kept: $(find "$D/mnt/.trashcan" -type f | wc -l) files"
