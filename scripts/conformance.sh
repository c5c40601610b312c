#!/bin/bash
# POSIX conformance of mortar volumes: builds pjdfstest and xfstests from
# the source snapshots in ../shared/suites (or $SUITES), starts a daemon of
# its own on a loopback address, creates and mounts volumes (replica 3 of
# three bricks each, or SETS replica sets of REPLICA bricks), runs the
# suites and prints their counts (one summary line per suite, and the
# failed tests).
#
# Usage: scripts/conformance.sh [pjdfstest|xfstests|all] [--keep]
#   env: SUITES=dir with the snapshots, WORK=scratch dir, MORTAR=binary,
#        XFSTESTS="arguments to xfstests' check" (default: -g quick
#          -e generic/103, which fills the file system the bricks share),
#        OUT=file to append Markdown table rows to, IP and PORT=where the
#        daemon listens (127.0.77.1:24198), SETS and REPLICA=the volumes'
#        shape (1 and 3: replica 3; SETS=2 REPLICA=1: distribute over 2),
#        or SETS and DISPERSE with REDUNDANCY (SETS=2 DISPERSE=3
#        REDUNDANCY=1: 2 x (2 + 1)), ACCESS=nfs: pjdfstest through the
#        volume's NFS server with fuse-nfs (an NFS client over FUSE, built
#        from its snapshot) instead of a native mount
# --keep leaves the volumes mounted and the daemon running for a look.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SUITES=${SUITES:-$ROOT/../shared/suites}
[ -e "$SUITES/pjdfstest.tar.gz" ] || SUITES=/work/shared/suites
WORK=${WORK:-$(mktemp -d /tmp/mortar-conformance.XXXXXX)}
# mktemp makes it 0700: xfstests' tests that run as an unprivileged user
# (193, 314, 317, 318, 355, 597, 598, 680, 688) must reach the mounts below.
chmod 0755 "$WORK"
WHICH=all
KEEP=0
for a in "$@"; do
    case $a in
        --keep) KEEP=1 ;;
        pjdfstest | xfstests | all) WHICH=$a ;;
        *) echo "usage: $0 [pjdfstest|xfstests|all] [--keep]" >&2; exit 2 ;;
    esac
done
want() { [ "$WHICH" = all ] || [ "$WHICH" = "$1" ]; }
IP=${IP:-127.0.77.1}
PORT=${PORT:-24198}
XFSTESTS=${XFSTESTS:--g quick -e generic/103}
SETS=${SETS:-1}
REPLICA=${REPLICA:-3}
DISPERSE=${DISPERSE:-0}
REDUNDANCY=${REDUNDANCY:-1}
ACCESS=${ACCESS:-fuse}
if [ "$DISPERSE" -gt 0 ]; then
    SHAPE="$SETS x disperse $DISPERSE redundancy $REDUNDANCY"
    WIDTH=$DISPERSE
elif [ "$REPLICA" -gt 1 ]; then
    SHAPE="$SETS x replica $REPLICA"
    WIDTH=$REPLICA
else
    SHAPE="distribute $SETS"
    WIDTH=1
fi

# Build packages, from Debian, as the suites' READMEs list them.
need=()
command -v fusermount3 >/dev/null || need+=(fuse3)
if want pjdfstest; then
    command -v autoreconf >/dev/null || need+=(autoconf automake libtool)
    command -v prove >/dev/null || need+=(perl)
fi
if want xfstests; then
    for p in acl attr automake bc dbench dump e2fsprogs fio gawk gcc indent \
        libacl1-dev libaio-dev libcap-dev libgdbm-dev libtool libtool-bin \
        liburing-dev make psmisc python3 quota sed uuid-dev uuid-runtime \
        xfsprogs xfslibs-dev sqlite3 libgdbm-compat-dev; do
        dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
    done
fi
if [ ${#need[@]} -gt 0 ]; then
    # Runs side by side (the tests run the suites at once) take turns with
    # apt, which refuses a second at once.
    flock /var/lock/mortar-conformance-apt.lock sh -c \
        'apt-get -o DPkg::Lock::Timeout=300 update -qq &&
         DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq "$@" >/dev/null' \
        sh "${need[@]}"
fi

if [ -z "${MORTAR:-}" ]; then
    cargo build --release --quiet
    MORTAR=$ROOT/target/release/mortar
fi
mkdir -p "$WORK"

# --- a daemon of our own ---
STATE=$WORK/state
MOUNTS=()
for m in "$WORK"/mnt-*; do [ -d "$m" ] && { umount -l "$m" 2>/dev/null || true; }; done
rm -rf "$STATE" "$WORK"/bricks
mkdir -p "$STATE" "$WORK/bricks"
cli() { "$MORTAR" --server $IP:$PORT "$@"; }
export MORTAR_CREDENTIAL=$STATE/tls/admin.pem   # the daemon's administrator credential
"$MORTAR" daemon --listen $IP:$PORT --host $IP --state-dir "$STATE" >>"$WORK/daemon.log" 2>&1 &
DAEMON=$!
cleanup() {
    [ $KEEP = 1 ] && { echo "kept: mounts ${MOUNTS[*]:-none}, daemon pid $DAEMON"; return; }
    for m in "$WORK"/mnt-*; do
        [ -d "$m" ] && { umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; }
    done
    kill $DAEMON 2>/dev/null || true
    wait $DAEMON 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 100); do cli volume list >/dev/null 2>&1 && break; sleep 0.1; done

# A started volume NAME of SETS sets of WIDTH bricks under $WORK/bricks.
volume() {
    local b=() r=()
    for i in $(seq 1 $((SETS * WIDTH))); do
        mkdir -p "$WORK/bricks/$1-$i"
        b+=("$IP:$WORK/bricks/$1-$i")
    done
    if [ "$DISPERSE" -gt 0 ]; then
        r=(disperse "$DISPERSE" redundancy "$REDUNDANCY")
    elif [ "$REPLICA" -gt 1 ]; then
        r=(replica "$REPLICA")
    fi
    cli volume create "$1" "${r[@]}" transport tcp "${b[@]}" force >/dev/null
    cli volume start "$1" >/dev/null
    mkdir -p "$WORK/mnt-$1"
}

# Volume $1 served by the pool's NFS server, mounted at $2 with fuse-nfs:
# each caller's ids in the calls (-o), permissions checked by the
# server (-p 0), as a kernel NFS client does, and nothing kept by FUSE
# (-T 0 -E 0 -N 0: fuse-nfs does not refresh what it changes, such as a
# file's link count after a link).
mount_nfs() {
    local FNFS
    FNFS=$(SUITES=$SUITES scripts/fuse-nfs.sh "$WORK")
    cli volume set "$1" nfs.disable off >/dev/null
    for _ in $(seq 100); do
        (echo >/dev/tcp/$IP/2049) 2>/dev/null && break
        sleep 0.1
    done
    "$FNFS" -n "nfs://$IP/$1?nfsport=2049&mountport=2049&version=3" -m "$2" -a -o -p 0 -T 0 -E 0 -N 0 -q \
        -L "$WORK/fuse-nfs-$1.log"
}

# --- pjdfstest: prove -r, as root, inside a directory of the mount ---
run_pjdfstest() {
    local PJD=$WORK/pjdfstest
    if [ ! -x "$PJD/pjdfstest" ]; then
        tar -xzf "$SUITES/pjdfstest.tar.gz" -C "$WORK"
        (cd "$PJD" && autoreconf -ifs >/dev/null 2>&1 && ./configure -q >/dev/null && make -s pjdfstest >/dev/null 2>&1)
    fi
    volume pjd
    local MNT=$WORK/mnt-pjd
    MOUNTS+=("$MNT")
    if [ "$ACCESS" = nfs ]; then
        mount_nfs pjd "$MNT"
    else
        "$MORTAR" mount --port $PORT $IP:/pjd "$MNT" --log-file "$WORK/client-pjd.log"
    fi
    mkdir -p "$MNT/pjd"
    local LOG=$WORK/pjdfstest.log
    set +e
    (cd "$MNT/pjd" && prove -r "$PJD/tests") >"$LOG" 2>&1
    set -e
    local summary result tests failed files
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
        echo "| pjdfstest | mortar $(git rev-parse --short HEAD) $SHAPE | $tests | $failed | ${files:-none} |" >>"$OUT"
    fi
}

# --- xfstests: FSTYP=fuse with a mount.fuse.mortar helper (README.fuse) ---
run_xfstests() {
    local XFS=$WORK/xfstests
    if [ ! -x "$XFS/check" ] || [ ! -e "$XFS/ltp/fsx" ]; then
        tar -xzf "$SUITES/xfstests.tar.gz" -C "$WORK"
        (cd "$XFS" && make -j"$(nproc)" >"$WORK/xfstests-build.log" 2>&1)
    fi
    # A mortar mount's type is fuse.mortar; xfstests maps the types of the
    # FUSE file systems it knows (fuse.glusterfs, fuse.ceph-fuse) the same way.
    grep -q 'fuse.mortar' "$XFS/common/rc" ||
        sed -i "s|-e 's/fuse.glusterfs/glusterfs/'|-e 's/fuse.mortar/fuse/' &|" "$XFS/common/rc"
    # mount(8) runs /sbin/mount.fuse.mortar for `mount -t fuse.mortar`.
    local helper=/sbin/mount.fuse.mortar
    if [ -e "$helper" ] && ! readlink "$helper" | grep -q mortar; then
        echo "$helper exists and is not mortar's; not replacing it" >&2
        exit 1
    fi
    ln -sf "$MORTAR" "$helper"
    # The users and group tests run as (README: fsgqa, fsgqa2, 123456-fsgqa).
    getent group fsgqa >/dev/null || groupadd fsgqa
    id fsgqa >/dev/null 2>&1 || useradd -m -g fsgqa fsgqa
    id fsgqa2 >/dev/null 2>&1 || useradd -m fsgqa2
    id 123456-fsgqa >/dev/null 2>&1 || useradd -m 123456-fsgqa
    volume xtest
    volume xscratch
    MOUNTS+=("$WORK/mnt-xtest" "$WORK/mnt-xscratch")
    cat >"$XFS/local.config" <<EOF
export TEST_DEV=$IP:/xtest
export TEST_DIR=$WORK/mnt-xtest
export SCRATCH_DEV=$IP:/xscratch
export SCRATCH_MNT=$WORK/mnt-xscratch
export FSTYP=fuse
export FUSE_SUBTYP=.mortar
export MOUNT_OPTIONS="-o port=$PORT"
export TEST_FS_MOUNT_OPTS="-o port=$PORT"
EOF
    local LOG=$WORK/xfstests.log
    set +e
    # shellcheck disable=SC2086 # XFSTESTS is a list of arguments
    (cd "$XFS" && ./check $XFSTESTS) >"$LOG" 2>&1
    set -e
    local ran notrun failures nran nfailed
    ran=$(grep -E '^Ran:' "$LOG" | sed 's/^Ran://' || true)
    notrun=$(grep -E '^Not run:' "$LOG" | sed 's/^Not run://' || true)
    failures=$(grep -E '^Failures:' "$LOG" | sed 's/^Failures: *//' || true)
    # "Ran:" lists the tests not run too.
    nnotrun=$(echo "$notrun" | wc -w)
    nran=$(($(echo "$ran" | wc -w) - nnotrun))
    nfailed=$(echo "$failures" | wc -w)
    echo "xfstests: $nran run, $((nran - nfailed)) passed, $nfailed failed, $nnotrun not run"
    [ -n "$failures" ] && echo "failed: $failures"
    echo "log: $LOG (per test: $XFS/results/)"
    if [ -n "${OUT:-}" ]; then
        echo "| xfstests $XFSTESTS | mortar $(git rev-parse --short HEAD) $SHAPE | $nran | $nfailed | ${failures:-none} |" >>"$OUT"
    fi
}

want pjdfstest && run_pjdfstest
want xfstests && run_xfstests
exit 0
