#!/usr/bin/env bash
# The one prepared run for a machine with a GPU (the lent H200 of the `device` tool). It
# must work in one try, within one 600-second command:
#   1. finds the programs in the build directory: built here and carried (the GPU machine
#      may lack GoogleTest, nvcc or time to build), or builds the missing ones (the
#      configure or build log's end is shown when that fails);
#   2. checks that each loads (no missing library) and lists the GPU tests;
#   3. without a GPU, stops there: exit 77 (CHORUS_GPU_CHECK_REHEARSE=1 goes on, to rehearse
#      the rest here: the GPU tests then skip themselves);
#   4. runs each GPU test alone under its own timeout, with CHORUS_TIMEOUT=20, so one hang
#      loses only itself; then the kernel benchmarks, the all_reduce_perf sweeps on device
#      buffers and tools/torch-cuda-check.sh, each with a timeout; nothing starts once the
#      budget (CHORUS_GPU_CHECK_BUDGET, 480 s after the build) is spent: it is listed as
#      not run.
# Logs, gtest XML and summary.txt go to $OUT (or <build>/gpu-check).
# Exit: 0 all passed, 1 a failure, a timeout or a step not run, 77 no GPU.
#
# Usage: tools/gpu-check.sh [build-dir (default: build)]
# From the session machine, after building here (about 35 MiB for sm_90, with the device code
# compressed for size: under the 64 MiB carry):
#   run(command="tools/gpu-check.sh build", timeout_s=600, carry=["build/libnccl.so.2.28.9",
#       "build/tests/gpu/chorus_gpu_tests", "build/bench/gpu_kernel_bench",
#       "build/tools/perf/all_reduce_perf"])
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${1:-$root/build}")
out=${OUT:-$build/gpu-check}
budget=${CHORUS_GPU_CHECK_BUDGET:-480}
export CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-20}
# Ranks sharing the GPU in one process need their kernels side by side: every stream a
# hardware queue of its own, or one rank's kernel may wait behind another's for good.
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
status=0

# --- 1. programs: carried, or built here --------------------------------------------
tests="$build/tests/gpu/chorus_gpu_tests"
bench="$build/bench/gpu_kernel_bench"
perf="$build/tools/perf/all_reduce_perf"
# A carried library comes without its links: all_reduce_perf loads libnccl.so.2.
if [[ ! -e $build/libnccl.so.2 ]]; then
  real=$(ls "$build"/libnccl.so.2.* 2>/dev/null | head -1)
  [[ -n $real ]] && ln -sf "$(basename "$real")" "$build/libnccl.so.2"
fi
missing=()
[[ -x $tests ]] || missing+=(chorus_gpu_tests)
[[ -x $bench ]] || missing+=(gpu_kernel_bench)
[[ -x $perf && -e $build/libnccl.so.2 ]] || missing+=(all_reduce_perf nccl)
if [[ ${#missing[@]} -gt 0 ]]; then
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
  say "== building ${missing[*]} for sm_${arch:-90} in $build"
  start=$SECONDS
  if ! cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCHORUS_CUDA_ARCHS="${arch:-90}" \
    -DCHORUS_BUILD_TORCH=OFF >"$out/configure.log" 2>&1; then
    say "== configure FAILED after $((SECONDS - start)) s; the end of $out/configure.log:"
    tail -30 "$out/configure.log"
    exit 1
  fi
  if ! cmake --build "$build" -j"$(nproc)" --target "${missing[@]}" >"$out/build.log" 2>&1; then
    say "== build FAILED after $((SECONDS - start)) s; the end of $out/build.log:"
    tail -30 "$out/build.log"
    exit 1
  fi
  say "== build: done in $((SECONDS - start)) s"
fi
export LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# --- 2. each program loads ------------------------------------------------------------
for program in "$tests" "$bench" "$perf" "$build/libnccl.so.2"; do
  if ldd "$program" 2>&1 | grep -q "not found"; then
    say "== $program cannot load:"
    ldd "$program" | grep "not found" | tee -a "$summary"
    exit 1
  fi
done
if ! "$tests" --gtest_list_tests >"$out/gpu_tests_list.txt" 2>&1; then
  say "== $tests does not run:"
  tail -20 "$out/gpu_tests_list.txt"
  exit 1
fi
# "Suite." lines, then "  Name" lines: Suite.Name per test.
mapfile -t gpu_tests < <(awk '/^[A-Za-z_0-9\/]+\.$/ {suite=$1; next} /^  [A-Za-z_0-9\/]+/ {print suite $1}' \
  "$out/gpu_tests_list.txt")
say "== programs ready: ${#gpu_tests[@]} GPU tests, kernel benchmarks, all_reduce_perf"

# --- 3. a GPU, or not -------------------------------------------------------------------
rehearsal=0
if nvidia-smi -L >"$out/gpus.txt" 2>&1; then
  cat "$out/gpus.txt"
  # The build's CUDA runtime needs a driver at least as new as its toolkit (CUDA 13: r580):
  # with an older one the runtime sees no GPU, communicators quietly become CPU ones, and
  # every GPU test skips itself. Said here, and each such skip fails below.
  say "== driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)," \
    "toolkit $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'unknown (no nvcc here)')"
elif [[ ${CHORUS_GPU_CHECK_REHEARSE:-0} == 1 ]]; then
  rehearsal=1
  say "== REHEARSAL without a GPU: every step runs, the GPU tests skip themselves"
else
  echo "gpu-check: skipped: no GPU (nvidia-smi -L: $(head -1 "$out/gpus.txt"))"
  exit 77
fi

# --- 4. the checks, each alone under its timeout, within the budget ---------------------
deadline=$((SECONDS + budget))
# step <name> <timeout s> <command...>: its output in $out/<name>.log, its result in the
# summary; exit 77 counts as skipped.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - SECONDS))
  if ((left < 15)); then
    say "NOT RUN (budget spent): $name"
    status=1
    return
  fi
  ((limit > left)) && limit=$left
  local start=$SECONDS
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local result
  case $rc in
    0)
      result=passed
      # A GPU test that skipped itself on a machine with a GPU: the runtime cannot use it.
      if [[ $rehearsal == 0 ]] && grep -q "GPU tests skipped:" "$out/$name.log"; then
        result="FAILED (nvidia-smi lists a GPU, the CUDA runtime does not: $(grep -o 'GPU tests skipped:.*' \
          "$out/$name.log" | head -1))"
        status=1
      fi
      ;;
    77) result=skipped ;;
    124 | 137) result="TIMED OUT after $limit s" status=1 ;;
    *) result="FAILED (exit $rc)" status=1 ;;
  esac
  say "$name: $result ($((SECONDS - start)) s)"
  [[ $rc -ne 0 && $rc -ne 77 ]] && tail -15 "$out/$name.log"
  return 0
}

for t in "${gpu_tests[@]}"; do
  step "gpu_test.$t" 60 "$tests" --gtest_filter="$t" --gtest_output="xml:$out/gpu_test.$t.xml"
done
step gpu_kernel_bench 90 "$bench" 256 200
step all_reduce_perf_g2 120 env CHORUS_ALLOW_SHARED_GPU=1 "$perf" -b 8 -e 256M -f 4 -g 2 -c 1 -n 20 -w 5
step all_reduce_perf_g1 60 "$perf" -b 8 -e 256M -f 16 -g 1 -c 1 -n 20 -w 5
step torch_cuda_check 120 "$root/tools/torch-cuda-check.sh" "$build" "${CHORUS_GPU_CHECK_PYTHON:-python3}"
for log in gpu_kernel_bench all_reduce_perf_g2 all_reduce_perf_g1; do
  [[ -s $out/$log.log ]] && { echo "== $log"; cat "$out/$log.log"; }
done
say "== gpu-check: $([[ $status -eq 0 ]] && echo passed || echo FAILED) (summary: $summary)"
exit $status
