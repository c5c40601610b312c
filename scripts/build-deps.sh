#!/bin/bash
# What building mortar needs beyond Rust, installed from Debian where
# missing: the erasure code (crates/ec) builds Intel's ISA-L from its
# sources with nasm and autotools, and generates its bindings with
# libclang. The programs built need none of them at run time (ISA-L is
# linked statically).
set -euo pipefail
need=()
command -v nasm >/dev/null || need+=(nasm)
command -v autoreconf >/dev/null || need+=(autoconf)
command -v automake >/dev/null || need+=(automake)
command -v libtoolize >/dev/null || need+=(libtool)
command -v make >/dev/null || need+=(make)
# libclang itself, as bindgen looks for it (libclang-cpp, which other
# packages bring, is not it).
ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/x86_64-linux-gnu/libclang-[0-9]*.so* >/dev/null 2>&1 || need+=(libclang-dev)
if [ ${#need[@]} -gt 0 ]; then
    echo "installing what the build needs: ${need[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
