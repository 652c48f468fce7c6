// Captures the library's NCCL_DEBUG_SUBSYS=TUNING log for one test and parses its
// per-call choice lines:
//   host:pid:tid [rank] NCCL INFO AllReduce: 4096 Bytes -> Algo Ring proto LL time 3.20 us (...)
//
// The log goes to <private dir>/log.%p, so every process (each rank in process
// mode, the test process in thread mode) writes its own file; lines() reads them
// all. Construct it before the communicators exist (see scoped_env.h).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "harness/scoped_env.h"

namespace chorus_test {

struct TuningChoice {
  int pid = 0;
  int rank = -1;           // the [rank] tag of the line
  std::string collective;  // "AllReduce", "ReduceScatter", ..., "SendRecv"
  size_t bytes = 0;
  std::string algo;   // "Ring", "Tree"
  std::string proto;  // "LL", "LL128", "Simple"
  double timeUs = 0;
  std::string line;  // the whole line, for messages
};

class TuningLogCapture {
 public:
  // Sets NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=`subsystems` and NCCL_DEBUG_FILE in `env`.
  explicit TuningLogCapture(ScopedEnv& env, const std::string& subsystems = "TUNING");
  ~TuningLogCapture();  // deletes the files
  TuningLogCapture(const TuningLogCapture&) = delete;
  TuningLogCapture& operator=(const TuningLogCapture&) = delete;

  std::vector<std::string> lines() const;     // every line of every file, file by file
  std::vector<TuningChoice> choices() const;  // the per-call choice lines, parsed
  // Deletes what was logged so far (between phases of one test; thread mode
  // needs ncclResetDebugInit first, which ScopedEnv::set does).
  void clear() const;

 private:
  std::vector<std::string> files() const;
  std::string directory_;
};

// Parses one choice line; false for any other line.
bool parseTuningChoice(const std::string& line, TuningChoice* choice);

}  // namespace chorus_test
