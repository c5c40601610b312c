#!/bin/bash
# The reference practical work, replayed on this host: a replica-3 volume of
# three bricks, mounted, then the seed's small-file loop and 1 GiB dd runs
# against the local disk, mortar and (when installed) GlusterFS.
#
# Usage: scripts/seed-bench.sh [--no-glusterfs]   (env: ROOT=/data N=2000 MB=1024)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${ROOT:-/data}
N=${N:-2000}
MB=${MB:-1024}
GLUSTER=1
[ "${1:-}" = "--no-glusterfs" ] && GLUSTER=0
HOST=$(hostname)
OUT=${OUT:-bench-report-seed.md}

scripts/install.sh

# --- mortar: daemon, volume, mount (the seed's sections 3.1-3.3) ---
if ! mortar volume list >/dev/null 2>&1; then
    nohup mortar daemon >>/var/log/mortar/daemon.log 2>&1 &
    for _ in $(seq 50); do mortar volume list >/dev/null 2>&1 && break; sleep 0.1; done
fi
if ! mortar volume info gv0 >/dev/null 2>&1; then
    mkdir -p $ROOT/brick1/gv0 $ROOT/brick2/gv0 $ROOT/brick3/gv0
    mortar volume create gv0 replica 3 transport tcp \
        $HOST:$ROOT/brick1/gv0 $HOST:$ROOT/brick2/gv0 $HOST:$ROOT/brick3/gv0 force
fi
mortar volume info gv0 | grep -q "Status: Started" || mortar volume start gv0
mortar volume info gv0
# A mount whose client is gone ("Transport endpoint is not connected") is let go first.
if grep -q " /mnt/gv0 " /proc/mounts && ! stat /mnt/gv0 >/dev/null 2>&1; then umount -l /mnt/gv0; fi
mkdir -p /mnt/gv0
mountpoint -q /mnt/gv0 || mount -t mortar $HOST:/gv0 /mnt/gv0
df -h | grep gv0
echo "hello from mortar" > /mnt/gv0/test.txt && cat /mnt/gv0/test.txt

targets=("local:$ROOT/local_test" "mortar:/mnt/gv0")

# --- GlusterFS 10.3, same shape, same disk ---
if [ $GLUSTER = 1 ]; then
    if ! command -v gluster >/dev/null; then
        apt-get install -y -qq glusterfs-server >/dev/null || true
    fi
    if command -v gluster >/dev/null; then
        pgrep -x glusterd >/dev/null || glusterd
        for _ in $(seq 50); do gluster --mode=script volume list >/dev/null 2>&1 && break; sleep 0.2; done
        if ! gluster --mode=script volume info gv0g >/dev/null 2>&1; then
            mkdir -p $ROOT/gbrick1/gv0g $ROOT/gbrick2/gv0g $ROOT/gbrick3/gv0g
            gluster --mode=script volume create gv0g replica 3 transport tcp \
                $HOST:$ROOT/gbrick1/gv0g $HOST:$ROOT/gbrick2/gv0g $HOST:$ROOT/gbrick3/gv0g force
        fi
        gluster --mode=script volume info gv0g | grep -q "Status: Started" || gluster --mode=script volume start gv0g
        mkdir -p /mnt/gv0g
        mountpoint -q /mnt/gv0g || mount -t glusterfs $HOST:/gv0g /mnt/gv0g
        targets+=("glusterfs:/mnt/gv0g")
    else
        echo "GlusterFS is not installed; measuring local and mortar only"
    fi
fi
mkdir -p $ROOT/local_test

# --- warm-up: on a virtual machine, the first write into never-touched guest
# memory costs several times more than later ones (measured: 560 MB/s for the
# first 6 GiB of page cache). Touch as much memory as the largest target will
# use (three brick copies of the big file, plus slack), so that whichever
# target runs first is not penalised.
if [ "${WARMUP:-1}" = 1 ]; then
    echo "== warm-up: $((MB * 4)) MiB through the page cache"
    dd if=/dev/zero of=$ROOT/warmup.tmp bs=1M count=$((MB * 4)) status=none
    rm -f $ROOT/warmup.tmp
    sync
fi

# --- section 4: the measurements ---
declare -A W R DW DR
for t in "${targets[@]}"; do
    name=${t%%:*}; dir=${t#*:}
    echo "== $name ($dir): small files, N=$N"
    res=$(scripts/smallfile_bench.sh "$dir" "$N")
    echo "$res"
    W[$name]=$(echo "$res" | sed -n 's/^Write time: \(.*\) s => \(.*\) ops\/s/\1 \2/p')
    R[$name]=$(echo "$res" | sed -n 's/^Read time: \(.*\) s => \(.*\) ops\/s/\1 \2/p')
    echo "== $name: ${MB} MiB dd, O_DIRECT"
    sync
    DW[$name]=$(cd "$dir" && dd if=/dev/zero of=largefile bs=1M count=$MB oflag=direct 2>&1 | tail -1 | awk -F', ' '{print $NF}')
    sync
    DR[$name]=$(cd "$dir" && dd if=largefile of=/dev/null bs=1M iflag=direct 2>&1 | tail -1 | awk -F', ' '{print $NF}')
    rm -f "$dir/largefile"
    echo "write ${DW[$name]}, read ${DR[$name]}"
done

{
    echo "Machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, kernel $(uname -r), $(date -u +%F)"
    echo
    echo "Table 1: Small file benchmark ($N files)"
    echo
    echo "| Backend | Write time (s) | Write (ops/s) | Read time (s) | Read (ops/s) |"
    echo "|---|---|---|---|---|"
    for t in "${targets[@]}"; do
        name=${t%%:*}
        read -r wt wo <<<"${W[$name]}"; read -r rt ro <<<"${R[$name]}"
        echo "| $name | $wt | $wo | $rt | $ro |"
    done
    echo
    echo "Table 2: Large file benchmark ($MB MiB, bs=1M, O_DIRECT)"
    echo
    echo "| Backend | Write throughput | Read throughput |"
    echo "|---|---|---|"
    for t in "${targets[@]}"; do
        name=${t%%:*}
        echo "| $name | ${DW[$name]} | ${DR[$name]} |"
    done
} | tee "$OUT"
echo "report written to $OUT"
