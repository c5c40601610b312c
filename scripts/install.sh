#!/bin/bash
# Builds mortar and installs it with its mount(8) helper, so that
# `mount -t mortar HOST:/VOL DIR` and /etc/fstab entries work.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v fusermount3 >/dev/null || ! command -v bc >/dev/null || ! command -v getfattr >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 bc attr >/dev/null
fi
scripts/build-deps.sh
cargo build --release --quiet
install -m 0755 target/release/mortar /usr/local/sbin/mortar
# The brick alone, a smaller program the daemon starts for each brick.
install -m 0755 target/release/mortar-brick /usr/local/sbin/mortar-brick
# The benchmark, its own program beside mortar (`mortar bench` runs it).
install -m 0755 target/release/mortar-bench /usr/local/sbin/mortar-bench
ln -sf /usr/local/sbin/mortar /sbin/mount.mortar
# A mounted volume's type is fuse.mortar: mount(8) hands `-o remount` to
# mount.fuse.mortar.
ln -sf /usr/local/sbin/mortar /sbin/mount.fuse.mortar
mkdir -p /var/log/mortar /var/lib/mortar
# The daemon's unit: restarted after a crash, its bricks running on.
install -D -m 0644 packaging/systemd/mortar.service /etc/systemd/system/mortar.service
install -D -m 0644 packaging/systemd/mortar.target /etc/systemd/system/mortar.target
# Scheduled snapshots: systemctl enable --now mortar-snapshot@VOLUME.timer.
install -D -m 0644 packaging/systemd/mortar-snapshot@.service /etc/systemd/system/mortar-snapshot@.service
install -D -m 0644 packaging/systemd/mortar-snapshot@.timer /etc/systemd/system/mortar-snapshot@.timer
# `man mortar`, `man mortar-volume-create`, ..., and completion in bash.
/usr/local/sbin/mortar man --out /usr/local/share/man/man1 >/dev/null
mkdir -p /usr/share/bash-completion/completions
/usr/local/sbin/mortar completions bash > /usr/share/bash-completion/completions/mortar
echo "installed /usr/local/sbin/mortar, /usr/local/sbin/mortar-brick, /usr/local/sbin/mortar-bench, /sbin/mount.mortar, /sbin/mount.fuse.mortar, /etc/systemd/system/mortar.service, mortar.target and mortar-snapshot@ (.service, .timer), the manual pages and bash completion"
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    echo "start the daemon with: systemctl enable --now mortar"
else
    echo "systemd does not run here: start the daemon with: mortar daemon &"
fi
