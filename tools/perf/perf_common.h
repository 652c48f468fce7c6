// The driver shared by every *_perf tool (nccl-tests compatible flags and output).
//
// A tool describes its collective in a CollectiveSpec and calls perfMain. The driver
// creates the communicators (threads × ranks per thread in this process, times the
// MPI processes when built with CHORUS_PERF_MPI), sweeps sizes, types and ops, times
// out-of-place and in-place runs, checks every element, and prints nccl-tests' table.
// Only the public API (nccl.h) and, where built with CUDA, the CUDA runtime are used;
// buffers come from ncclMemAlloc: device memory where a GPU is present (each rank on its
// own stream, as nccl-tests), host memory elsewhere (perf_memory.h).
#pragma once

#include <cstddef>

#include "nccl.h"

namespace chorus::perf {

// Element counts of one run, nccl-tests' getCollByteCount. `count` = size / type size.
struct BufferCounts {
  size_t send;               // elements in each rank's send buffer
  size_t recv;               // elements in each rank's receive buffer
  size_t param;              // the count argument of the NCCL call
  size_t sendInplaceOffset;  // in place: send = recv + sendInplaceOffset * rank
  size_t recvInplaceOffset;  // in place: recv = recv + recvInplaceOffset * rank
};

// Where receive element `index` of `rank` comes from.
struct ElementSource {
  enum Kind { kUnchecked, kCopy, kReduce } kind;
  int rank;      // kCopy: the sending rank
  size_t index;  // element of the send buffer(s)
};

struct LaunchArgs {
  const void* send;
  void* recv;
  size_t count;  // BufferCounts::param
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
  int rank;
  int nranks;
  ncclComm_t comm;
  cudaStream_t stream;
};

struct CollectiveSpec {
  const char* name;  // "AllReduce"
  bool usesOp;
  bool usesRoot;
  // nccl-tests times but does not check in-place SendRecv and AlltoAll: NCCL does not
  // define them (a rank's send block may be overwritten by a receive before it leaves).
  bool checksInPlace;
  BufferCounts (*counts)(size_t count, int nranks);
  // algbw counts param × type size bytes, times nranks when this is set.
  bool algBytesTimesRanks;
  double (*busBwFactor)(int nranks);
  ncclResult_t (*launch)(const LaunchArgs& args);
  ElementSource (*source)(size_t recvIndex, int rank, int nranks, int root, size_t param);
};

// Runs the tool; returns the process exit code (non-zero on wrong results or errors).
int perfMain(int argc, char** argv, const CollectiveSpec& spec);

// busbw factors of nccl-tests (0 for a single rank, as there).
inline double busBwAllReduce(int n) { return 2.0 * (n - 1) / n; }
inline double busBwAllToOne(int n) { return double(n - 1) / n; }
inline double busBwOne(int) { return 1.0; }

}  // namespace chorus::perf
