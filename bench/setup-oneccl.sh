#!/usr/bin/env bash
# Installs Intel oneCCL 2021.16 from PyPI into a directory of its own (default <repo>/.oneccl), for
# the bench's oneccl_allreduce peer. Not run by CI or tools/setup-deps.sh: the bench only.
#
#   bench/setup-oneccl.sh [DIR]
#   cmake -S bench -B /tmp/bench-build -DONECCL_ROOT=DIR   (only needed when DIR is not the default)
#
# Why these exact packages and --no-deps:
# - the oneccl-cpu packages from 2021.17 on lack libccl.so.2 (issue 22); 2021.16.0 has libccl.so.1.
# - impi-rt brings the libfabric oneCCL's ATL/OFI transport loads at run time (libfabric.so.1 and
#   its shm and tcp providers, lib*-fi.so, in DIR/lib); its Intel MPI is not used.
# - the packages' declared dependencies (Intel OpenMP, SYCL runtime, ...) are not needed on CPU.
# A venv (not pip --target) because the wheels put their libraries in <prefix>/lib and their
# headers in <prefix>/include, which --target drops.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:-$repo/.oneccl}
python=${PYTHON:-python3}

if [[ ! -x $dir/bin/python ]]; then
  "$python" -m venv "$dir"
fi
"$dir/bin/python" -m pip install --disable-pip-version-check --no-deps \
  oneccl-cpu==2021.16.0 oneccl-cpu-devel==2021.16.0 'impi-rt==2021.16.*'

for f in include/oneapi/ccl.hpp lib/libccl.so.1 lib/libfabric.so.1 lib/libshm-fi.so lib/libtcp-fi.so; do
  if [[ ! -e $dir/$f ]]; then
    echo "setup-oneccl.sh: $dir/$f is missing after the install" >&2
    exit 1
  fi
done
echo "oneCCL 2021.16.0 installed in $dir (headers in include/, libccl and libfabric in lib/)"
if [[ $dir != "$repo/.oneccl" ]]; then
  echo "configure the bench with -DONECCL_ROOT=$dir"
fi
