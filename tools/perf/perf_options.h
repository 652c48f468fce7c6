// Command-line options of the perf tools: nccl-tests' flags, short and long, with its defaults.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "nccl.h"
#include "perf_data.h"
#include "sweep_flags.h"

namespace chorus::perf {

// How per-rank times combine into the reported time (-a).
enum class AverageMode { Rank0 = 0, Mean = 1, Min = 2, Max = 3 };

// The sweep (sweep_flags.h), then the flags only the perf tools take.
struct PerfOptions : SweepFlags {
  int aggIters = 1;  // collectives per group in one timed iteration
  std::vector<PerfOp> ops = {PerfOp::Sum};
  std::vector<ncclDataType_t> types = {ncclFloat32};
  int root = 0;
  bool blocking = false;  // wait for completion after every collective
  AverageMode average = AverageMode::Mean;
  bool reportCpuTime = false;
  int nThreads = 1;
  int nGpus = 1;  // ranks driven by each thread ("GPUs" in nccl-tests)
  bool parallelInit = false;
  bool localRegister = false;  // -R 1: each rank's buffers registered with ncclCommRegister
};

// Parses argv. Returns 0 to run, otherwise the exit code (help printed: 0 → returned as -1
// so the caller exits successfully; bad usage: 1). Messages go to stderr.
int parsePerfOptions(int argc, char** argv, PerfOptions* options);

}  // namespace chorus::perf
