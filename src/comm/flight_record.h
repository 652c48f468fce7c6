// A communicator's flight record: its last calls (number, what, state, when), for the
// hang report (src/report/hang_report.h). One short lock per call recorded.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "device/common/call_stamp.h"
#include "nccl.h"

namespace chorus {

class FlightRecord {
 public:
  static constexpr size_t kCalls = 8;  // a short record: the last calls are what a hang is about
  enum class State : uint8_t { Running, Done, Failed };
  struct Entry {
    CallStamp call;
    int peer = -1;  // Send/Recv: the other rank
    State state = State::Running;
    ncclResult_t result = ncclSuccess;
    double startSec = 0;  // CLOCK_MONOTONIC_COARSE: to the kernel's tick (1-10 ms), enough
    double endSec = 0;    // for a report about calls that stall for seconds
  };

  // A call planned to run now (buildLanes).
  void started(const CallStamp& call, int peer);
  // The run of every call started since the last finished() ended with `result`.
  void finished(ncclResult_t result);
  // The recorded calls, oldest first.
  std::vector<Entry> entries() const;

  static double now();

 private:
  mutable std::mutex mutex_;
  std::array<Entry, kCalls> ring_{};
  uint64_t recorded_ = 0;
  uint64_t firstRunning_ = 0;  // entries from here on are still Running
};

}  // namespace chorus
