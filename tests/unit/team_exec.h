// A test executor whose lanes are teams of host threads: the team half of the Exec
// interface (device/common/team_ops.h) as a GPU block has it, so the cooperative code
// paths the CUDA executor compiles are run and checked on a machine without a GPU.
// Memory ordering and waits are the CPU executor's.
#pragma once

#include <atomic>
#include <barrier>

#include "device/cpu/cpu_exec.h"

namespace chorus {
namespace fixtures {

// What the threads of one team share.
struct TeamState {
  explicit TeamState(int n) : barrier(n) {}
  std::barrier<> barrier;
  // teamAll's votes, three rounds deep: round r votes in slot r % 3, and thread 0 clears
  // slot (r + 2) % 3 (read in round r - 1 by threads that have all passed round r's
  // barrier, written next in round r + 2, after thread 0 has passed round r + 1).
  std::atomic<bool> someFalse[3] = {false, false, false};
  WorkItem item{};  // teamItem's copy, as a GPU block's shared memory holds it
};

class TeamExec {
 public:
  static constexpr bool kTeamOfOne = false;

  TeamExec(ExecContext& ctx, TeamState& team, int tid, int nthreads)
      : ctx_(ctx), cpu_(ctx), team_(team), tid_(tid), nthreads_(nthreads) {}

  static uint64_t loadAcquire(const uint64_t* p) { return CpuExec::loadAcquire(p); }
  static void storeRelease(uint64_t* p, uint64_t v) { CpuExec::storeRelease(p, v); }
  static void storeReleaseOwn(uint64_t* p, uint64_t v) { CpuExec::storeReleaseOwn(p, v); }
  static uint64_t loadRelaxed(const uint64_t* p) { return CpuExec::loadRelaxed(p); }
  static void storeRelaxed(uint64_t* p, uint64_t v) { CpuExec::storeRelaxed(p, v); }
  static void wakeSleepers(const FifoEnd& end, const uint64_t* counter) { CpuExec::wakeSleepers(end, counter); }
  static void fenceRelease() { CpuExec::fenceRelease(); }
  static void fenceAcquire() { CpuExec::fenceAcquire(); }

  int tid() const { return tid_; }
  int nthreads() const { return nthreads_; }
  void teamSync() { team_.barrier.arrive_and_wait(); }
  bool teamAll(bool v) {
    const int slot = round_ % 3;
    if (!v) team_.someFalse[slot].store(true);
    team_.barrier.arrive_and_wait();
    const bool all = !team_.someFalse[slot].load();
    if (tid_ == 0) team_.someFalse[(round_ + 2) % 3].store(false);
    ++round_;
    return all;
  }

  // As CudaExec::teamItem: the team's copy, filled word by word by its threads.
  const WorkItem& teamItem(const WorkItem& item) {
    constexpr int kWords = sizeof(WorkItem) / sizeof(uint64_t);
    for (int i = tid_; i < kWords; i += nthreads_)
      reinterpret_cast<uint64_t*>(&team_.item)[i] = reinterpret_cast<const uint64_t*>(&item)[i];
    teamSync();
    return team_.item;
  }

  template <typename Cond>
  bool waitUntil(Cond&& cond, const FifoEnd& end) {
    return cpu_.waitUntil(cond, end);
  }
  void fail(const FifoEnd& end, const char* what, long got, long expected) { cpu_.fail(end, what, got, expected); }
  void mismatch(const FifoEnd& end, const CallStamp& theirs, const CallStamp& mine, const char* why) {
    cpu_.mismatch(end, theirs, mine, why);
  }
  bool failed() const { return ctx_.failed(); }

 private:
  ExecContext& ctx_;
  CpuExec cpu_;
  TeamState& team_;
  int tid_;
  int nthreads_;
  int round_ = 0;
};

}  // namespace fixtures
}  // namespace chorus
