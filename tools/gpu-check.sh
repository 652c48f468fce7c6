#!/usr/bin/env bash
# The one prepared run for a machine with a GPU (the lent H200 of the `device` tool):
# builds the CUDA executor's kernels for the GPU present (unless the programs are already
# in the build directory, built elsewhere and carried), runs the GPU test suite and the
# kernel benchmarks and an all_reduce_perf sweep on device buffers, and leaves their logs in $OUT (or <build>/gpu-check). Sized to
# finish within 8 minutes on one H200. Exit: 0 all passed, 1 a failure, 77 no GPU.
# Usage: tools/gpu-check.sh [build-dir]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu}
out=${OUT:-$build/gpu-check}
mkdir -p "$out"

if ! nvidia-smi -L >"$out/gpus.txt" 2>&1; then
  echo "gpu-check: skipped: no GPU (nvidia-smi -L failed: $(head -1 "$out/gpus.txt"))"
  exit 77
fi
cat "$out/gpus.txt"
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')

tests="$build/tests/gpu/chorus_gpu_tests"
bench="$build/bench/gpu_kernel_bench"
perf="$build/tools/perf/all_reduce_perf"
# Programs carried from a build elsewhere are used as they are (the H200 image may lack
# GoogleTest: carry build/tests/gpu/chorus_gpu_tests); the missing ones are built here.
missing=()
[[ -x $tests ]] || missing+=(chorus_gpu_tests)
[[ -x $bench ]] || missing+=(gpu_kernel_bench)
[[ -x $perf ]] || missing+=(all_reduce_perf)
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "== building ${missing[*]} for sm_$arch in $build"
  start=$SECONDS
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCHORUS_CUDA_ARCHS="$arch" \
    -DCHORUS_BUILD_TORCH=OFF >"$out/configure.log" 2>&1 &&
    cmake --build "$build" -j"$(nproc)" --target "${missing[@]}" >"$out/build.log" 2>&1
  rc=$?
  echo "== build: exit $rc in $((SECONDS - start)) s (logs in $out)"
  if [[ $rc -ne 0 ]]; then
    tail -30 "$out/build.log"
    exit 1
  fi
fi
# all_reduce_perf loads libnccl.so.2 from the build, wherever the build was made.
export LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

status=0
echo "== GPU test suite"
timeout 300 "$tests" --gtest_output="xml:$out/gpu_tests.xml" 2>&1 | tee "$out/gpu_tests.log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
echo "== kernel benchmarks"
timeout 120 "$bench" 256 200 2>&1 | tee "$out/gpu_kernel_bench.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
echo "== all_reduce_perf: device buffers, 2 ranks sharing the GPU, then 1 rank"
CHORUS_ALLOW_SHARED_GPU=1 timeout 150 "$perf" -b 8 -e 256M -f 4 -g 2 -c 1 -n 20 -w 5 2>&1 | tee "$out/all_reduce_perf_g2.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
timeout 60 "$perf" -b 8 -e 256M -f 16 -g 1 -c 1 -n 20 -w 5 2>&1 | tee "$out/all_reduce_perf_g1.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
echo "== gpu-check: $([[ $status -eq 0 ]] && echo passed || echo FAILED)"
exit $status
