#!/usr/bin/env bash
# A /dev/shm too small for the SHM transport's FIFOs must give a clear error that names
# /dev/shm and the bytes needed, and no crash or hang. Runs the two-process example in a
# private mount namespace whose /dev/shm is a 64 KiB tmpfs; skipped (77) where mount
# namespaces cannot be made (not root, no CAP_SYS_ADMIN).
set -u
example=$1
if ! unshare --mount true 2>/dev/null; then
  echo "SKIP: cannot create a mount namespace here"
  exit 77
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
NCCL_DEBUG=WARN CHORUS_BOOTSTRAP_TIMEOUT=20 timeout 60 unshare --mount sh -c \
  'mount -t tmpfs -o size=64k tmpfs /dev/shm && exec "$0" 2 1024' "$example" >"$log" 2>&1
status=$?
cat "$log"
if [ "$status" -eq 0 ]; then
  echo "FAIL: the example succeeded although /dev/shm holds only 64 KiB"
  exit 1
fi
if [ "$status" -eq 124 ]; then
  echo "FAIL: the example hung"
  exit 1
fi
if ! grep -q "/dev/shm is too small: the connection from rank [0-9] needs [0-9]* bytes there" "$log"; then
  echo "FAIL: no WARN naming /dev/shm and the bytes needed"
  exit 1
fi
echo "PASS: clear /dev/shm error, exit status $status"
