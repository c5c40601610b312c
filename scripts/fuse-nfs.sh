#!/bin/bash
# Builds fuse-nfs (an NFSv3 client over FUSE, on libnfs) from its source
# snapshot in ../shared/suites (or $SUITES) into DIR (default
# /var/tmp/mortar-tools), once, and prints the program's path. Used where
# this machine has no kernel NFS client: pjdfstest through NFS
# (scripts/conformance.sh) and `mortar bench --access nfs`.
#
# Usage: scripts/fuse-nfs.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
SUITES=${SUITES:-$PWD/../shared/suites}
[ -e "$SUITES/fuse-nfs.tar.gz" ] || SUITES=/work/shared/suites
DIR=${1:-/var/tmp/mortar-tools}
FNFS=$DIR/fuse-nfs/fuse/fuse-nfs
if [ -x "$FNFS" ]; then
    echo "$FNFS"
    exit 0
fi
if [ ! -e "$SUITES/fuse-nfs.tar.gz" ]; then
    echo "fuse-nfs: its source snapshot (fuse-nfs.tar.gz) is not in $SUITES" >&2
    exit 1
fi
# The build packages fuse-nfs's README lists.
need=()
for p in libfuse-dev libnfs-dev libtool m4 automake autoconf xsltproc make gcc; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "fuse-nfs: installing ${need[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
mkdir -p "$DIR"
rm -rf "$DIR/fuse-nfs"
tar -xzf "$SUITES/fuse-nfs.tar.gz" -C "$DIR"
if ! (cd "$DIR/fuse-nfs" && ./setup.sh && ./configure && make) >"$DIR/fuse-nfs-build.log" 2>&1; then
    echo "fuse-nfs: the build failed; see $DIR/fuse-nfs-build.log" >&2
    exit 1
fi
echo "$FNFS"
