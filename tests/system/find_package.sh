#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds a user project against it with
# find_package(Chorus), then runs it against the installed libnccl.so.2.
set -eu
build_dir=$1
source_dir=$(cd "$(dirname "$0")" && pwd)/consumer
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
libdir=$(dirname "$(find "$work/prefix" -name 'libnccl.so.2' | head -n1)")
test -f "$work/prefix/include/nccl.h"
test -L "$libdir/libnccl.so"
LD_LIBRARY_PATH="$libdir" "$work/build/consumer"
# The consumer must have loaded the installed library, not another libnccl.so.2.
LD_LIBRARY_PATH="$libdir" ldd "$work/build/consumer" | grep -q "$libdir/libnccl.so.2"
echo "PASS: find_package(Chorus) consumer built and ran against $libdir"
