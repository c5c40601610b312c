#!/bin/bash
# Heavy load on a mounted volume, for watching how a pool behaves under it
# (docs/protocol.md measured the slowest ping answer this way): two busy
# loops on the CPU, a 1 GiB write with fsync, a 1 GiB O_DIRECT write, a
# small-file churn, reads and listings, and `sync` every 0.5 s.
#
# Usage: scripts/load.sh MOUNT        (env: SECS=150)
set -u
M=${1:?usage: $0 MOUNT}
end=$((SECONDS + ${SECS:-150}))
busy() { while [ $SECONDS -lt $end ]; do :; done; }
busy &
busy &
(while [ $SECONDS -lt $end ]; do dd if=/dev/zero of="$M/load-big1" bs=1M count=1024 conv=fsync status=none; done) &
(while [ $SECONDS -lt $end ]; do dd if=/dev/urandom of="$M/load-big2" bs=4M count=256 oflag=direct status=none; done) &
(mkdir -p "$M/load-small"; i=0; while [ $SECONDS -lt $end ]; do
    i=$((i + 1)); echo $i >"$M/load-small/f$((i % 3000))"
    [ $((i % 500)) = 0 ] && rm -f "$M"/load-small/f1*
done) &
(while [ $SECONDS -lt $end ]; do cat "$M/load-big1" >/dev/null 2>&1; ls -lR "$M/load-small" >/dev/null 2>&1; done) &
(while [ $SECONDS -lt $end ]; do sync; sleep 0.5; done) &
wait
rm -rf "$M/load-big1" "$M/load-big2" "$M/load-small"
