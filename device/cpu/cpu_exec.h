// The CPU executor's side of device/common's Exec interface: memory ordering of the
// FIFO counters and how a host thread waits.
//
// A wait spins briefly, then lets the thread's other lanes run (FiberScheduler),
// then yields the core, then sleeps in the kernel on a futex on the counter it waits
// for, which the other side's publish wakes (wakeSleepers: the peer in shared memory,
// or over the network the proxy) — with other lanes on the thread, briefly, as their
// counters do not wake it. 8 ranks on 2 cores must not starve each other, nor a
// model's threads. Every wait ends early when
// the communicator is aborted, when the peer's process has died, or after the progress
// timeout (CHORUS_TIMEOUT): a sleep lasts at most CHORUS_WAIT_SLEEP_US, then they are
// checked again.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "core/debug.h"
#include "core/futex.h"
#include "device/common/step_fifo.h"
#include "nccl.h"

namespace chorus {

// Shared by every lane of one communicator's run.
struct ExecContext {
  const std::atomic<uint32_t>* abortFlag = nullptr;
  // ncclCommRevoke: waits stop as for an abort, but the communicator's bootstrap stays
  // usable (for ncclCommShrink and ncclCommSplit).
  const std::atomic<uint32_t>* revokeFlag = nullptr;
  int rank = -1;
  LogName commName;       // ncclConfig_t.commName, for the lines this rank's work logs
  double timeoutSec = 0;  // 0: no timeout
  // Polls before a wait starts yielding. Few when the host runs more ranks than it has
  // cores: the peer being waited for may then need this very core.
  int spins = kDefaultSpins;
  static constexpr int kDefaultSpins = 256;
  static constexpr int kOversubscribedSpins = 4;
  // How long a wait on a proxied end moves its connection itself before it sleeps
  // (CpuExec::driveUntil). With more ranks than cores, one look: the core is wanted elsewhere.
  double driveUs = kDefaultDriveUs;
  static constexpr double kDefaultDriveUs = 50;
  // The longest one sleep of a wait lasts (CHORUS_WAIT_SLEEP_US); 0: waits nap instead.
  long sleepMaxUs = 10000;
  // The hang report of this rank's communicator (src/report/hang_report.h), set by the host:
  // called once, when a wait timed out or a stuck wait was aborted; `stuck` says what it waited for.
  std::function<void(const char* why, const std::string& stuck)> reportStuck;
  std::atomic<bool> stuckReported{false};
  std::atomic<int> result{ncclSuccess};  // first failure wins
  std::atomic<bool> peersTold{false};    // the failure was marked on every connection (lane_runner.cc)

  // The waits of `ofRank` of a communicator: they end when either flag is set, or after
  // `timeout` seconds without progress (0: never); with more ranks on the host than cores
  // (`localRanks`) they yield after few polls, since the peer waited for may need this very core.
  void configure(const std::atomic<uint32_t>* abort, const std::atomic<uint32_t>* revoke, int ofRank, double timeout,
                 int localRanks);

  void setError(ncclResult_t r) {
    int expected = ncclSuccess;
    result.compare_exchange_strong(expected, r);
  }
  bool failed() const { return result.load(std::memory_order_relaxed) != ncclSuccess; }
};

// The waits this thread has ended: a lane that sees it unchanged over many rounds of
// yielding knows that the thread's other lanes are all waiting too.
inline thread_local uint64_t tWaitsEnded = 0;

class CpuExec {
 public:
  explicit CpuExec(ExecContext& ctx) : ctx_(ctx) {}

  // A lane is one host thread: a team of one (team_ops.h).
  static constexpr bool kTeamOfOne = true;
  static constexpr int tid() { return 0; }
  static constexpr int nthreads() { return 1; }
  static void teamSync() {}
  static bool teamAll(bool v) { return v; }

  static uint64_t loadAcquire(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
  static void storeRelease(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
  static void storeReleaseOwn(uint64_t* p, uint64_t v) { storeRelease(p, v); }  // the thread's own stores
  // Untorn 8-byte accesses without ordering: LL's {data, flag} words.
  static uint64_t loadRelaxed(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
  static void storeRelaxed(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
  // After publishing `counter` (tail or head of `end`): wakes the waits asleep on it
  // (core/futex.h says why none is lost). After a small step, a proxied end's connection
  // is then moved by this thread if it can be (the step sent right here, or the freed slot
  // given to the net: no hand-off to the proxy thread, FifoEnd::drive); a stream of large
  // steps stays the proxy's, which moves it while this thread computes. Otherwise a
  // sleeping proxy is rung: it announces its sleep in `proxyAsleep` before its last look
  // at the counters, and the fence in wakeSleepersOf orders the publish before the read of
  // the announcement.
  static void wakeSleepers(const FifoEnd& end, const uint64_t* counter) {
    wakeSleepersOf(counter, &end.ctrl->sleepers);
    if (end.drive != nullptr && lastStepWasSmall(end) && end.drive(end.driveArg)) return;
    ringProxyIfAsleep(end.ctrl);
  }
  static void ringProxyIfAsleep(const StepFifoControl* ctrl) {
    if (const uint32_t bell = __atomic_load_n(&ctrl->proxyAsleep, __ATOMIC_RELAXED); bell != 0) ringProxy(bell);
  }

  static void fenceRelease() { __atomic_thread_fence(__ATOMIC_RELEASE); }
  static void fenceAcquire() { __atomic_thread_fence(__ATOMIC_ACQUIRE); }
  // break_ends.h: the host's compare-and-swap (step_fifo.h).
  static void markBroken(StepFifoControl* ctrl, BrokenCause cause) { chorus::markBroken(ctrl, cause); }

  // Bulk moves of FIFO words (LL lines): each aligned 8-byte word untorn, no order among
  // them. SSE2 moves of 16 bytes, whose 8-byte halves are each single accesses; the
  // compiler barriers keep the compiler from caching or reordering them across polls.
  static void loadWords(const uint64_t* src, uint64_t* dst, size_t n) {
    asm volatile("" ::: "memory");
    size_t i = 0;
#ifdef __SSE2__
    for (; i + 2 <= n; i += 2)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
#endif
    for (; i < n; ++i) dst[i] = loadRelaxed(src + i);
  }
  static void storeWords(uint64_t* dst, const uint64_t* src, size_t n) {
    size_t i = 0;
#ifdef __SSE2__
    for (; i + 2 <= n; i += 2)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
#endif
    for (; i < n; ++i) storeRelaxed(dst + i, src[i]);
    asm volatile("" ::: "memory");
  }

  template <typename Cond>
  bool waitUntil(Cond&& cond, const FifoEnd& end) {
    if (cond()) {
      ++tWaitsEnded;
      return true;
    }
    const bool drove = end.drive != nullptr && lastStepWasSmall(end);
    if (drove && driveUntil(cond, end)) {
      ++tWaitsEnded;
      return true;
    }
    for (int i = 0; i < ctx_.spins; ++i) {
      if (cond()) {
        ++tWaitsEnded;
        return true;
      }
      __builtin_ia32_pause();
    }
    WaitState state;
    while (!cond()) {
      const Wait result = keepWaiting(end, &state);
      switch (result) {
        case Wait::kGoOn:
          break;
        case Wait::kSleep: {
          // The counter is read before the sleep is announced: if it moves after this
          // read, the futex returns at once; a publish after the announcement wakes it.
          const uint32_t seen = __atomic_load_n(counterWord(end), __ATOMIC_ACQUIRE);
          // A connection this thread drove may have a receive posted, or a message begun, that
          // the sleeping proxy does not watch yet: ringing makes it look again before it sleeps.
          if (drove) ringProxyIfAsleep(end.ctrl);
          announceSleep(end, 1);
          if (!cond()) sleepOn(end, seen, state.sleepUs);
          announceSleep(end, -1);
          break;
        }
        case Wait::kStop:
          return false;
        case Wait::kBroken:
        case Wait::kPeerExited:
          // A connection breaks, and a peer exits, after delivering what it sent (a peer
          // that closed when done): the step waited for may have landed just before.
          if (cond()) return true;
          reportGone(end, result);
          return false;
      }
    }
    ++tWaitsEnded;
    return true;
  }

  // A malformed step: records ncclInvalidUsage with a WARN naming the peer.
  void fail(const FifoEnd& end, const char* what, long got, long expected);
  // The board (board.h) found that `receiver` received `received` of the `sent` steps
  // `sender` sent it on the ring before this call: records ncclInvalidUsage with a WARN.
  void staleRingSteps(int sender, int receiver, uint64_t sent, uint64_t received, const CallStamp& mine);
  // The peer's call `theirs` is not this rank's `mine` (step_stamps.h): records
  // ncclInvalidUsage with a WARN naming both calls.
  void mismatch(const FifoEnd& end, const CallStamp& theirs, const CallStamp& mine, const char* why);

 private:
  // A proxied end's wait whose last step was small (a latency-bound call) first moves the
  // connection itself (FifoEnd::drive): once, then for up to ctx_.driveUs. A step that
  // arrives meanwhile is read by this thread, without waking the proxy and then this
  // thread. True once `cond` holds. In a stream of large steps the proxy alone moves them,
  // while this thread computes or sleeps.
  template <typename Cond>
  bool driveUntil(Cond& cond, const FifoEnd& end) {
    end.drive(end.driveArg);
    if (ctx_.driveUs <= 0) return cond();
    const double until = monotonicSec() + ctx_.driveUs * 1e-6;
    for (unsigned round = 1;; ++round) {
      if (cond()) return true;
      if ((round & 7) == 0 && monotonicSec() >= until) return false;
      yieldToOtherLanes();  // this thread's other lanes move meanwhile
      end.drive(end.driveArg);
    }
  }
  static double monotonicSec();
  static void yieldToOtherLanes();
  // Whether the step before the current one on `end` was small enough for the waiting
  // thread to move (FifoEnd::kDriveMaxBytes): in a stream of large steps the proxy moves
  // them while this thread computes, and a spinning wait would only take its core.
  static bool lastStepWasSmall(const FifoEnd& end) {
    return end.step == 0 || end.ctrl->sizes[(end.step - 1) & static_cast<uint64_t>(end.nSlots - 1)] <=
                                static_cast<int64_t>(FifoEnd::kDriveMaxBytes);
  }

  struct WaitState {
    uint64_t rounds = 0;
    double start = 0;
    double nextCheck = 0;
    long sleepUs = 0;           // how long the next sleep may last (kSleep)
    uint64_t waitsEndedAt = 0;  // tWaitsEnded when this wait last looked
  };
  enum class Wait { kGoOn, kSleep, kStop, kBroken, kPeerExited };
  // Yields or naps once, or says to sleep on the counter (kSleep); kStop when the wait
  // must end (abort, timeout, failure elsewhere; the error is recorded), kBroken when the
  // connection is marked broken, kPeerExited when the peer's process is gone (neither
  // recorded yet: what was waited for may have come first).
  Wait keepWaiting(const FifoEnd& end, WaitState* state);
  // The low word of the counter `end` waits for (head when sending, tail when receiving).
  static const uint32_t* counterWord(const FifoEnd& end) {
    return lowWord(end.sending ? &end.ctrl->head : &end.ctrl->tail);
  }
  static void announceSleep(const FifoEnd& end, int delta);
  // Sleeps until the counter's low word is no longer `seen`, a wake-up, or `us`.
  void sleepOn(const FifoEnd& end, uint32_t seen, long us);
  static void ringProxy(uint32_t bell);
  // Records why a wait ended on kBroken or kPeerExited, with its WARN.
  void reportGone(const FifoEnd& end, Wait why);
  // A wait that will not end: the hang report, once per context.
  void reportStuck(const FifoEnd& end, const char* why);

  ExecContext& ctx_;
};

}  // namespace chorus
