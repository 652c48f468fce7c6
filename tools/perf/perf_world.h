// The processes of one perf run: just this one, or every process of an MPI job
// (built with -DCHORUS_PERF_MPI). Only the calling thread of each process talks to MPI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"

namespace chorus::perf {

class PerfWorld {
 public:
  PerfWorld(int* argc, char*** argv);  // MPI_Init when built with MPI
  ~PerfWorld();                        // MPI_Finalize
  PerfWorld(const PerfWorld&) = delete;
  PerfWorld& operator=(const PerfWorld&) = delete;

  int procRank() const { return procRank_; }
  int procCount() const { return procCount_; }

  void broadcastId(ncclUniqueId* id) const;  // from process 0 to all
  double sum(double value) const;
  double min(double value) const;
  double max(double value) const;
  int64_t sum(int64_t value) const;
  void barrier() const;
  // Every process's `line`, in process order, at process 0 (empty elsewhere).
  std::vector<std::string> gatherLines(const std::string& line) const;

 private:
  int procRank_ = 0;
  int procCount_ = 1;
};

// Ends every process of the run now (MPI_Abort under MPI): after a failed NCCL call the
// other ranks would wait for this one forever.
[[noreturn]] void abortRun();

}  // namespace chorus::perf
