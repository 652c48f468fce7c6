// A test executor whose lanes are teams of host threads: the team half of the Exec
// interface (device/common/team_ops.h) as a GPU block has it, so the cooperative code
// paths the CUDA executor compiles are run and checked on a machine without a GPU.
// Memory ordering and waits are the CPU executor's.
//
// TeamExecOf<8> also moves LL128 lines by groups of eight threads, as a warp does
// (ll128_primitives.h): a group's pieces of a line are stored together with the flag
// released after the others (what a warp's single 128-byte store gives on NVLink), and
// read once the last thread's wait for the flag succeeded and the group voted.
#pragma once

#include <atomic>
#include <barrier>
#include <memory>
#include <vector>

#include "device/cpu/cpu_exec.h"

namespace chorus {
namespace fixtures {

// A barrier of `n` threads that also tells whether every one of them passed true.
struct Vote {
  explicit Vote(int n) : barrier(n) {}
  // Round r votes in slot r % 3, and the leader clears slot (r + 2) % 3 (read in round
  // r - 1 by threads that have all passed round r's barrier, written next in round r + 2,
  // after the leader has passed round r + 1). `round`: the caller's count of its votes.
  bool all(bool v, int* round, bool leader) {
    const int slot = *round % 3;
    if (!v) someFalse[slot].store(true);
    barrier.arrive_and_wait();
    const bool result = !someFalse[slot].load();
    if (leader) someFalse[(*round + 2) % 3].store(false);
    ++*round;
    return result;
  }
  std::barrier<> barrier;
  std::atomic<bool> someFalse[3] = {false, false, false};
};

// What the threads of one team share.
struct TeamState {
  // `lineThreads`: the size of the groups that move an LL128 line (1: none).
  explicit TeamState(int n, int lineThreads = 1) : team(n) {
    if (lineThreads > 1)
      for (int g = 0; g < n / lineThreads; ++g) groups.push_back(std::make_unique<Vote>(lineThreads));
  }
  Vote team;
  std::vector<std::unique_ptr<Vote>> groups;
  WorkItem item{};                  // teamItem's copy, as a GPU block's shared memory holds it
  std::atomic<long> linePieces{0};  // calls of writeLinePiece and readLinePiece
};

template <int LineThreads>
class TeamExecOf {
 public:
  static constexpr bool kTeamOfOne = false;
  static constexpr int kLineThreads = LineThreads;

  TeamExecOf(ExecContext& ctx, TeamState& team, int tid, int nthreads)
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
  void teamSync() { team_.team.barrier.arrive_and_wait(); }
  bool teamAll(bool v) { return team_.team.all(v, &teamRound_, tid_ == 0); }

  // As CudaExec::teamItem: the team's copy, filled word by word by its threads.
  const WorkItem& teamItem(const WorkItem& item) {
    constexpr int kWords = sizeof(WorkItem) / sizeof(uint64_t);
    for (int i = tid_; i < kWords; i += nthreads_)
      reinterpret_cast<uint64_t*>(&team_.item)[i] = reinterpret_cast<const uint64_t*>(&item)[i];
    teamSync();
    return team_.item;
  }

  // As CudaExec's: the group's pieces of a line, the flag word released after the rest.
  void writeLinePiece(uint64_t* line, int piece, uint64_t w0, uint64_t w1) {
    team_.linePieces.fetch_add(1, std::memory_order_relaxed);
    storeRelaxed(line + 2 * piece, w0);
    if (piece != kLast) storeRelaxed(line + 2 * piece + 1, w1);
    group().barrier.arrive_and_wait();
    if (piece == kLast) storeRelease(line + 2 * piece + 1, w1);
  }
  bool readLinePiece(const uint64_t* line, int piece, uint64_t flag, uint64_t* w0, uint64_t* w1, const FifoEnd& end) {
    team_.linePieces.fetch_add(1, std::memory_order_relaxed);
    bool ready = true;
    if (piece == kLast) ready = cpu_.waitUntil([&] { return loadAcquire(line + 2 * kLast + 1) == flag; }, end);
    if (!group().all(ready, &groupRound_, piece == 0)) return false;
    *w0 = loadRelaxed(line + 2 * piece);
    *w1 = loadRelaxed(line + 2 * piece + 1);
    return true;
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
  static constexpr int kLast = LineThreads - 1;
  Vote& group() { return *team_.groups[tid_ / LineThreads]; }

  ExecContext& ctx_;
  CpuExec cpu_;
  TeamState& team_;
  int tid_;
  int nthreads_;
  int teamRound_ = 0;
  int groupRound_ = 0;
};

using TeamExec = TeamExecOf<1>;

}  // namespace fixtures
}  // namespace chorus
