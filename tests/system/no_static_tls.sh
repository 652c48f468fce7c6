#!/bin/sh
# libnccl.so.2 must be loadable with dlopen late in a process: PyTorch loads it that way,
# after its own libraries have taken glibc's small reserve of static TLS. A library with
# initial-exec thread-locals (the STATIC_TLS flag) then fails to load ("cannot allocate
# memory in static TLS block"), as a build of Chorus did when it tried them for speed.
lib="$1"
if ! command -v readelf >/dev/null 2>&1; then
  echo "readelf not found: skipped"
  exit 77
fi
if readelf -d "$lib" | grep -q STATIC_TLS; then
  echo "FAIL: $lib has the STATIC_TLS flag (an initial-exec thread_local); dlopen after PyTorch would fail"
  exit 1
fi
echo "ok: $lib uses only dynamic TLS"
