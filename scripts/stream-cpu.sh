#!/bin/bash
# Streaming through a replica-3 volume: 256 MiB written and read with dd
# (1 MiB blocks, O_DIRECT) through one mount, bricks in /dev/shm, and the
# CPU time and system calls of the brick host and the client for each
# (`perf stat`). BINDIR holds `mortar` and `mortar-brick`.
#
#   scripts/stream-cpu.sh [BINDIR]
#
# Starts a private daemon (port 24998) in /dev/shm/dm and removes it after.
set -e
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then sed -n '2,8p' "$0"; exit 0; fi
command -v perf >/dev/null || { echo "stream-cpu.sh: perf is missing (apt-get install linux-perf)" >&2; exit 1; }
B=${1:-$(dirname "$0")/../target/release}
W=/dev/shm/dm
umount -l $W/mnt 2>/dev/null || true
pkill -f "state-dir $W/state" || true; pkill -f "mortar-brick --host --run $W" || true; sleep 0.5
rm -rf $W; mkdir -p $W/mnt
export MORTAR_CREDENTIAL=$W/state/tls/admin.pem
$B/mortar daemon --listen 127.0.0.1:24998 --host 127.0.0.1 --state-dir $W/state > $W/daemon.log 2>&1 &
for i in $(seq 100); do $B/mortar --server 127.0.0.1:24998 volume list >/dev/null 2>&1 && break; sleep 0.1; done
$B/mortar --server 127.0.0.1:24998 volume create dm replica 3 127.0.0.1:$W/b1 127.0.0.1:$W/b2 127.0.0.1:$W/b3 force >/dev/null
$B/mortar --server 127.0.0.1:24998 volume start dm >/dev/null
$B/mortar mount --port 24998 127.0.0.1:/dm $W/mnt
H=$(pgrep -f "mortar-brick --host --run $W")
C=$(pgrep -f "mortar mount .*$W/mnt")
for phase in write read; do
  if [ $phase = write ]; then cmd="dd if=/dev/zero of=$W/mnt/big bs=1M count=256 oflag=direct"; else echo 3 > /proc/sys/vm/drop_caches; cmd="dd if=$W/mnt/big of=/dev/null bs=1M iflag=direct"; fi
  perf stat -x, -e task-clock,raw_syscalls:sys_enter -p $H -o /tmp/ph.$phase.host &
  P1=$!
  perf stat -x, -e task-clock,raw_syscalls:sys_enter -p $C -o /tmp/ph.$phase.client &
  P2=$!
  sleep 0.5
  r=$($cmd 2>&1 | tail -1)
  kill -INT $P1 $P2; wait $P1 $P2 2>/dev/null || true
  echo "$phase: $r"
  echo "  host:   $(grep -v '^#' /tmp/ph.$phase.host | grep . | cut -d, -f1,3 | tr '\n' ' ')"
  echo "  client: $(grep -v '^#' /tmp/ph.$phase.client | grep . | cut -d, -f1,3 | tr '\n' ' ')"
done
umount -l $W/mnt || true
pkill -f "state-dir $W/state" || true
pkill -f "mortar-brick --host --run $W" || true
sleep 0.5
rm -rf $W
