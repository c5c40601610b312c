#!/bin/bash
# Builds the Debian package of mortar (cargo-deb): the program, the brick
# program, the mount helpers (made by its postinst), the systemd units, the
# manual pages, bash completion, the alert rules and the Grafana
# dashboard (docs/operations.md). Writes target/debian/mortar_*.deb.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-deb >/dev/null || cargo install cargo-deb --locked
scripts/build-deps.sh
cargo build --release --locked
target="${CARGO_TARGET_DIR:-target}"
extra="$target/deb-extra"
rm -rf "$extra"
mkdir -p "$extra/systemd" "$extra/man"
# The packaged program lives in /usr/sbin, not /usr/local/sbin.
for unit in mortar.service mortar.target mortar-snapshot@.service mortar-snapshot@.timer; do
    sed 's|/usr/local/sbin/mortar|/usr/sbin/mortar|' "packaging/systemd/$unit" > "$extra/systemd/$unit"
done
"$target/release/mortar" man --out "$extra/man" >/dev/null
"$target/release/mortar" completions bash > "$extra/mortar.bash"
# The assets name target/deb-extra: point it at the target directory used.
[ "$target" = target ] || { mkdir -p target && rm -rf target/deb-extra && cp -r "$extra" target/deb-extra; }
# Stripped: the release profile keeps line tables for backtraces (debug = 1).
cargo deb --no-build --locked --strip "$@"
