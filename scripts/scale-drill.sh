#!/bin/bash
# Management at scale: N servers on this machine (one daemon each, on its
# own loopback address 127.0.<x>.<y>, one brick each), probed into one pool
# one by one, then a volume of N bricks (replica 3, N a multiple of 3) is
# created, started, mounted, written, has an option set and its status
# read. Prints how long each management command took, the TCP connections
# accepted and TCP segments received on this machine meanwhile (management
# requests and heartbeats are a connection each; Raft's messages travel on
# connections kept open, so segments count them), and the daemons' memory
# and CPU.
#
# With NETNS=1 each server is a host of its own: a network namespace
# with one address (10.77.x.y/16) on a bridge, as the servers of a real
# pool are. All namespaces share the host's neighbour (ARP) table, which
# the kernel keeps near 1,024 entries by default: from about 30 servers
# the drill raises net.ipv4.neigh.default.gc_thresh1/2/3 (a pool of N
# servers that all talk to each other needs about N*N entries).
#
# Every command must succeed, and none may take more than LIMIT ms (none
# by default); the daemons' logs must hold no malformed message. The
# script exits non-zero otherwise.
#
# Usage: scripts/scale-drill.sh       (env: MORTAR=path/to/mortar N=12 DIR=/var/tmp/mortar-scale
#                                          NETNS=1: one network namespace per server;
#                                          LIMIT=ms: fail on any command slower than this;
#                                          SETTLE=2: seconds between commands;
#                                          REPEAT=K: stop and start the volume K more times;
#                                          KEEP=1: leave the servers running at the end;
#                                          MULTIPLEX=off: a process per brick, not the brick host)
set -euo pipefail
B=${MORTAR:-mortar}
N=${N:-12}
D=${DIR:-/var/tmp/mortar-scale}
P=24177
NETNS=${NETNS:-0}
(( N % 3 == 0 )) || { echo "N must be a multiple of 3" >&2; exit 1; }
(( NETNS == 0 || N < 250 * 250 )) || { echo "N too large" >&2; exit 1; }

BR=mdrill0
if (( NETNS )); then
    ip() { echo "10.77.$(( $1 / 250 )).$(( 1 + $1 % 250 ))"; }
    ns() { echo "mdrill$1"; }
    # Runs a command as host $1 sees the network.
    on() { local h=$1; shift; nsenter --net="/run/netns/$(ns "$h")" "$@"; }
else
    ip() { echo "127.0.$(( 100 + $1 / 250 )).$(( 1 + $1 % 250 ))"; }
    on() { shift; "$@"; }
fi
cleanup() {
    umount -l "$D/mnt" 2>/dev/null || true
    pkill -f "state-dir $D/" 2>/dev/null || true
    pkill -f "mortar[- ]brick .*$D/" 2>/dev/null || true
    if (( NETNS )); then
        for n in $(command ip netns list | awk '/^mdrill[0-9]/ {print $1}'); do
            command ip netns del "$n" 2>/dev/null || true
        done
        command ip link del "$BR" 2>/dev/null || true
    fi
}
trap cleanup EXIT
cleanup
rm -rf "$D" && mkdir -p "$D/mnt"

if (( NETNS )); then
    for k in 1 2 3; do
        want=$(( N * N * k ))
        have=$(sysctl -n net.ipv4.neigh.default.gc_thresh$k)
        (( have >= want )) || sysctl -qw net.ipv4.neigh.default.gc_thresh$k=$want
    done
    command ip link add "$BR" type bridge
    command ip addr add 10.77.255.254/16 dev "$BR"
    command ip link set "$BR" up
    for i in $(seq 0 $(( N - 1 ))); do
        command ip netns add "$(ns "$i")"
        command ip link add "${BR}v$i" type veth peer name eth0 netns "$(ns "$i")"
        command ip link set "${BR}v$i" master "$BR" up
        on "$i" sh -c "ip addr add $(ip "$i")/16 dev eth0 && ip link set eth0 up && ip link set lo up"
    done
fi

ms() { date +%s%N | cut -c1-13; }
# A column of the kernel's TCP counters, summed over this machine's
# network namespaces that take part: the root one (the CLI, the mount),
# and with NETNS=1 each server's (read through its daemon's /proc entry).
tcp_sum() {
    local files=(/proc/net/snmp)
    if (( NETNS )); then
        for pid in $(pgrep -f "mortar daemon .*state-dir $D/"); do
            files+=("/proc/$pid/net/snmp")
        done
    fi
    cat "${files[@]}" 2>/dev/null | awk -v c="$1" '/^Tcp:/ { if (h) { n += $c; h = 0 } else h = 1 } END { print n + 0 }'
}
# TCP connections accepted so far.
msgs() { tcp_sum 6; }
# TCP segments received so far.
segs() { tcp_sum 11; }
timed() {
    local what=$1; shift
    local m0 s0 t0
    # Let the previous command's effects settle (300 servers applying a
    # change, bricks starting), as between two commands a person types.
    sleep "${SETTLE:-2}"
    m0=$(msgs); s0=$(segs); t0=$(ms)
    "$@" >/dev/null
    local took=$(( $(ms) - t0 ))
    echo "$what: $took ms, $(( $(msgs) - m0 )) connections, $(( $(segs) - s0 )) segments"
    if [ -n "${LIMIT:-}" ] && (( took > LIMIT )); then
        echo "FAILED: $what took $took ms, more than LIMIT=$LIMIT ms" >&2
        exit 1
    fi
}

for i in $(seq 0 $(( N - 1 ))); do
    mkdir -p "$D/s$i/brick"
    on "$i" "$B" daemon --listen "$(ip "$i"):$P" --host "$(ip "$i")" --state-dir "$D/s$i/state" \
        >"$D/s$i/daemon.log" 2>&1 &
done
for i in $(seq 0 $(( N - 1 ))); do
    for _ in $(seq 100); do "$B" --credential "$D/s$i/state/tls/admin.pem" --server "$(ip "$i"):$P" volume list >/dev/null 2>&1 && break; sleep 0.05; done
done
# Each server joins with its join token; the first server's administrator
# runs the pool.
token() { "$B" --credential "$D/s$1/state/tls/admin.pem" --server "$(ip "$1"):$P" peer token; }
export MORTAR_CREDENTIAL=$D/s0/state/tls/admin.pem
S="--server $(ip 0):$P"
t0=$(ms); slowest=0
for i in $(seq 1 $(( N - 2 ))); do
    p0=$(ms)
    "$B" $S peer probe "$(ip "$i")" --token "$(token "$i")" >/dev/null
    p=$(( $(ms) - p0 )); (( p > slowest )) && slowest=$p
done
echo "$N servers: probing $(( N - 2 )) peers one by one: $(( $(ms) - t0 )) ms in all, the slowest $slowest ms"
# The last server is added to a pool at rest, as an operator adding one
# server would: the probes above each start before the last one's
# aftermath (every member taking the new membership) is over.
timed "adding one server to a pool of $(( N - 1 ))" "$B" $S peer probe "$(ip $(( N - 1 )))" --token "$(token $(( N - 1 )))"
if [ -n "${MULTIPLEX:-}" ]; then
    "$B" $S volume set all cluster.brick-multiplex "$MULTIPLEX" >/dev/null
fi
bricks=$(for i in $(seq 0 $(( N - 1 ))); do echo -n "$(ip "$i"):$D/s$i/brick/sc "; done)
# shellcheck disable=SC2086
timed "volume create ($N bricks, replica 3)" "$B" $S volume create sc replica 3 $bricks force
timed "volume start" "$B" $S volume start sc
"$B" mount --port $P "$(ip 0)":/sc "$D/mnt" --log-file "$D/client.log"
t0=$(ms)
# 10 files per server, at most 600 (a create looks its name up on every
# replica set until the distribute issue: 3,000 files at 300 servers take
# minutes).
F=$(( N * 10 < 600 ? N * 10 : 600 ))
for f in $(seq 1 $F); do echo "$f" > "$D/mnt/f$f"; done
echo "wrote $F files through the mount: $(( $(ms) - t0 )) ms"
timed "volume set" "$B" $S volume set sc network.ping-timeout 30
timed "volume status" "$B" $S volume status sc
timed "peer status" "$B" $S peer status
timed "volume info --up-to-date (on the last server)" "$B" --server "$(ip $(( N - 1 ))):$P" volume info sc --up-to-date
m0=$(msgs); s0=$(segs); sleep 2
echo "idle (heartbeats): $(( ($(msgs) - m0) / 2 )) connections and $(( ($(segs) - s0) / 2 )) segments per second"
rss=0; cpu=0
for pid in $(pgrep -f "mortar daemon .*state-dir $D/"); do
    rss=$(( rss + $(awk '/VmRSS/ {print $2}' /proc/"$pid"/status) ))
    cpu=$(( cpu + $(awk '{print $14 + $15}' /proc/"$pid"/stat) ))
done
echo "daemons: $(( rss / 1024 )) MiB resident in all, $(( cpu / $(getconf CLK_TCK) )) s of CPU in all"
# CPU ticks used so far by the processes whose command line matches $1.
ticks() {
    local t=0
    for pid in $(pgrep -f "$1"); do
        t=$(( t + $(awk '{print $14 + $15}' /proc/"$pid"/stat 2>/dev/null || echo 0) ))
    done
    echo "$t"
}
d0=$(ticks "mortar daemon .*state-dir $D/"); b0=$(ticks "mortar[- ]brick .*$D/"); sleep 5
d1=$(ticks "mortar daemon .*state-dir $D/"); b1=$(ticks "mortar[- ]brick .*$D/")
hz=$(getconf CLK_TCK)
echo "idle CPU: daemons $(( (d1 - d0) * 100 / hz / 5 ))% of a core, bricks $(( (b1 - b0) * 100 / hz / 5 ))% of a core"
# Connections each host holds open at rest (its daemon's and brick's, and
# with NETNS=0 all hosts' together): established TCP sockets in its
# network namespace, both ends counted where both are in it.
if (( NETNS )); then
    conns=$(for pid in $(pgrep -f "mortar daemon .*state-dir $D/"); do
        cat /proc/"$pid"/net/tcp /proc/"$pid"/net/tcp6 2>/dev/null | awk '$4 == "01"' | wc -l
    done | sort -n)
    echo "connections per host at rest: least $(echo "$conns" | head -1), median $(echo "$conns" | sed -n "$(( (N + 1) / 2 ))p"), most $(echo "$conns" | tail -1)"
fi
# The same volume stopped and started again, REPEAT times: its bricks
# known to the pool and made on disk, the pool no longer young.
for r in $(seq "${REPEAT:-0}"); do
    "$B" $S volume stop sc >/dev/null
    timed "volume start again ($r)" "$B" $S volume start sc
done
bad=$(cat "$D"/s*/daemon.log "$D"/s*/state/logs/*.log 2>/dev/null | grep -c "malformed" || true)
if (( bad > 0 )); then
    echo "FAILED: $bad malformed messages in the daemons' logs, the first:" >&2
    grep -h -m1 "malformed" "$D"/s*/daemon.log "$D"/s*/state/logs/*.log 2>/dev/null | head -1 >&2
    exit 1
fi
echo "no malformed message in any log"
if [ "${KEEP:-0}" = 1 ]; then
    trap - EXIT
    echo "servers left running; to stop them: umount -l $D/mnt; pkill -f 'state-dir $D/'"
fi
