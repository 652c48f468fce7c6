// Command-line options of the perf tools: nccl-tests' flags, short and long, with its defaults.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "nccl.h"
#include "perf_data.h"
#include "size_arg.h"  // parseSize

namespace chorus::perf {

// How per-rank times combine into the reported time (-a).
enum class AverageMode { Rank0 = 0, Mean = 1, Min = 2, Max = 3 };

struct PerfOptions {
  size_t minBytes = 32 << 20;
  size_t maxBytes = 32 << 20;
  size_t stepBytes = 1 << 20;
  double stepFactor = 1;  // > 1: multiply sizes by it; otherwise add stepBytes
  int iters = 20;
  int warmupIters = 1;
  int aggIters = 1;  // collectives per group in one timed iteration
  int check = 1;     // 0: no check; otherwise check every element once per size
  std::vector<PerfOp> ops = {PerfOp::Sum};
  std::vector<ncclDataType_t> types = {ncclFloat32};
  int root = 0;
  bool blocking = false;  // wait for completion after every collective
  AverageMode average = AverageMode::Mean;
  bool reportCpuTime = false;
  int nThreads = 1;
  int nGpus = 1;  // ranks driven by each thread ("GPUs" in nccl-tests)
  bool parallelInit = false;
};

// Parses argv. Returns 0 to run, otherwise the exit code (help printed: 0 → returned as -1
// so the caller exits successfully; bad usage: 1). Messages go to stderr.
int parsePerfOptions(int argc, char** argv, PerfOptions* options);

// The sizes of the sweep, in bytes.
std::vector<size_t> sweepSizes(const PerfOptions& options);

}  // namespace chorus::perf
