#!/bin/bash
# Three mortar servers on this one machine, to try a real pool: each server
# is a network namespace (a "host" with its own address, 10.77.0.1-3) on a
# bridge, running its own daemon; they form one pool, a replica-3 volume
# `try` has one brick on each, and it is mounted here at DIR/mnt.
#
#   scripts/try-cluster.sh start [DIR]    # DIR: /var/tmp/mortar-try
#   scripts/try-cluster.sh stop [DIR]
#
# MORTAR names the program (default: mortar on PATH, else target/release).
# Needs root, ip(8), nsenter(1) and /dev/fuse (docs/operations.md).
set -euo pipefail
cmd=${1:-start}
dir=${2:-/var/tmp/mortar-try}
here=$(cd "$(dirname "$0")/.." && pwd)
MORTAR=${MORTAR:-$(command -v mortar || echo "$here/target/release/mortar")}
BR=mtry0
NET=10.77.0
PORT=24107
HOSTS=(1 2 3)

cli() {
    local i=$1
    shift
    "$MORTAR" --server "$NET.$i:$PORT" --credential "$dir/s$i/state/tls/admin.pem" "$@"
}

# Waits up to $1 seconds for the command after it to succeed.
wait_for() {
    local limit=$1
    shift
    for _ in $(seq $((limit * 5))); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "timed out waiting for: $*" >&2
    return 1
}

# Whether the first server sees the two others.
pool_connected() {
    [ "$(cli 1 peer status | grep -c Connected)" -eq 2 ]
}

stop() {
    if mountpoint -q "$dir/mnt" 2>/dev/null; then
        umount "$dir/mnt" || umount -l "$dir/mnt"
    fi
    for i in "${HOSTS[@]}"; do
        if [ -f "$dir/s$i/daemon.pid" ]; then
            kill "$(cat "$dir/s$i/daemon.pid")" 2>/dev/null || true
        fi
    done
    sleep 1
    for i in "${HOSTS[@]}"; do
        if ip netns list | grep -qw "mtry$i"; then
            # Its bricks, and anything else left in the namespace.
            ip netns pids "mtry$i" | xargs -r kill -9 2>/dev/null || true
            ip netns del "mtry$i"
        fi
    done
    ip link del "$BR" 2>/dev/null || true
    rm -rf "$dir"
    echo "stopped; $dir removed"
}

start() {
    if ip link show "$BR" >/dev/null 2>&1; then
        echo "a try-out pool runs already: $0 stop $dir first" >&2
        exit 1
    fi
    [ -x "$MORTAR" ] || { echo "no mortar program at $MORTAR (cargo build --release, or MORTAR=...)" >&2; exit 1; }
    ip link add "$BR" type bridge
    ip addr add "$NET.254/24" dev "$BR"
    ip link set "$BR" up
    for i in "${HOSTS[@]}"; do
        ip netns add "mtry$i"
        ip link add "${BR}v$i" type veth peer name eth0 netns "mtry$i"
        ip link set "${BR}v$i" master "$BR" up
        nsenter --net="/run/netns/mtry$i" sh -c "ip addr add $NET.$i/24 dev eth0 && ip link set eth0 up && ip link set lo up"
        mkdir -p "$dir/s$i/state" "$dir/s$i/brick"
        # Its own session: it outlives this script.
        nsenter --net="/run/netns/mtry$i" setsid "$MORTAR" daemon \
            --listen "$NET.$i:$PORT" --host "$NET.$i" --state-dir "$dir/s$i/state" \
            >"$dir/s$i/daemon.log" 2>&1 </dev/null &
        echo $! >"$dir/s$i/daemon.pid"
    done
    for i in "${HOSTS[@]}"; do
        wait_for 20 cli "$i" volume list
    done
    for i in "${HOSTS[@]:1}"; do
        token=$(cli "$i" peer token)
        cli 1 peer probe "$NET.$i" --token "$token"
    done
    wait_for 20 pool_connected
    cli 1 volume create try replica 3 transport tcp \
        "$NET.1:$dir/s1/brick" "$NET.2:$dir/s2/brick" "$NET.3:$dir/s3/brick" force
    cli 1 volume start try
    mkdir -p "$dir/mnt"
    "$MORTAR" mount --port "$PORT" "$NET.1:/try" "$dir/mnt" \
        -o "credential=$dir/s1/state/tls/admin.pem,backup-volfile-servers=$NET.2:$NET.3"
    cat <<EOF

A pool of three servers ($NET.1-3, each a network namespace mtry1-3)
holds volume 'try', replica 3, mounted at $dir/mnt.

  $MORTAR --server $NET.1 --credential $dir/s1/state/tls/admin.pem volume status try
  nsenter --net=/run/netns/mtry2 ip link set eth0 down     # take server 2 off the network
  curl http://$NET.1:24108/metrics                         # a daemon's metrics (a brick's: port 25300)
  $0 stop $dir

Logs: $dir/s*/daemon.log and $dir/s*/state/logs/.
EOF
}

case "$cmd" in
    start) start ;;
    stop) stop ;;
    *)
        echo "usage: $0 start|stop [DIR]" >&2
        exit 2
        ;;
esac
