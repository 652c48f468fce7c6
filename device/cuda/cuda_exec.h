// The CUDA executor's side of device/common's Exec interface: one thread block runs a
// lane, its threads a team (team_ops.h). FIFO counters and LL words live in memory
// another GPU or the host may write (peer memory, pinned host memory), so loads and
// stores use the system scope.
//
// A wait polls its condition, and every kPollsPerCheck polls also the abort flag, the
// connection's `broken` word, failures of other blocks and the timeout (the GPU's
// global timer), so that no kernel outlives an abort, a dead peer or CHORUS_TIMEOUT.
// nvcc only.
#pragma once

#include <cstdint>

#include "device/common/break_ends.h"
#include "device/common/step_fifo.h"
#include "device/common/step_stamps.h"
#include "device/cuda/kernel_args.h"

namespace chorus {

class CudaExec {
 public:
  static constexpr bool kTeamOfOne = false;
  static constexpr uint32_t kPollsPerCheck = 1024;

  __device__ explicit CudaExec(const KernelArgs& args) : args_(args) {}

  __device__ static uint64_t loadAcquire(const uint64_t* p) {
    uint64_t v;
    asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
  }
  // The team's data were written by other threads too: the caller has passed a team
  // barrier (teamSync), and the system fence makes all of it visible before the counter.
  __device__ static void storeRelease(uint64_t* p, uint64_t v) {
    __threadfence_system();
    asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  }
  // The calling thread's own earlier stores only (an LL128 line it wrote whole): the
  // release store alone orders them, no fence needed.
  __device__ static void storeReleaseOwn(uint64_t* p, uint64_t v) {
    asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  }
  __device__ static uint64_t loadRelaxed(const uint64_t* p) {
    uint64_t v;
    asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
  }
  __device__ static void storeRelaxed(uint64_t* p, uint64_t v) {
    asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  }

  // Only CPU waits sleep on a counter (step_fifo.h); a GPU communicator has none.
  __device__ static void wakeSleepers(const FifoEnd&, const uint64_t*) {}

  __device__ static void fenceRelease() { __threadfence_system(); }
  __device__ static void fenceAcquire() { __threadfence_system(); }
  // break_ends.h: the connection's `broken` word is in memory the host and other GPUs
  // poll, hence the system scope.
  __device__ static void markBroken(StepFifoControl* ctrl, BrokenCause cause) {
    atomicCAS_system(&ctrl->broken, 0u, static_cast<uint32_t>(cause));
    __threadfence_system();
  }

  __device__ int tid() const { return static_cast<int>(threadIdx.x); }
  __device__ int nthreads() const { return static_cast<int>(blockDim.x); }
  __device__ void teamSync() const { __syncthreads(); }
  __device__ bool teamAll(bool v) const { return __syncthreads_and(v ? 1 : 0) != 0; }

  // `item` copied word by word into the block's shared memory by its threads, for all of
  // them to read (lane_program.h); called by every thread, after a team barrier that every
  // thread passed once done with the previous item.
  __device__ const WorkItem& teamItem(const WorkItem& item) const {
    static_assert(sizeof(WorkItem) % sizeof(uint64_t) == 0 && alignof(WorkItem) >= alignof(uint64_t));
    constexpr int kWords = sizeof(WorkItem) / sizeof(uint64_t);
    __shared__ uint64_t copy[kWords];  // words: a __shared__ variable takes no constructor
    for (int i = tid(); i < kWords; i += nthreads()) copy[i] = reinterpret_cast<const uint64_t*>(&item)[i];
    __syncthreads();
    return *reinterpret_cast<const WorkItem*>(copy);
  }

  template <typename Cond>
  __device__ bool waitUntil(Cond&& cond, const FifoEnd& end) {
    uint64_t start = 0;
    for (uint32_t polls = 1;; ++polls) {
      if (cond()) return true;
      if (polls % kPollsPerCheck == 0 && !keepWaiting(end, &start, cond)) return false;
    }
  }

  // LL128 data lines move by eight threads of a warp, 16 bytes each (ll128_primitives.h).
  static constexpr int kLineThreads = 8;
  static_assert(kCudaThreadsPerLane % 32 == 0, "a line's eight threads lie in one warp");

  // The eight lanes of this thread's warp that hold its line.
  __device__ static unsigned lineGroup() {
    const unsigned lane = threadIdx.x % 32;
    return 0xffu << (lane & ~7u);
  }

  // This thread's piece of a line: one 16-byte store, which the warp's eight threads of the
  // line make together, so the line leaves as one 128-byte store. The threads took paths
  // of different lengths to get here (the last one holds 8 payload bytes, the others 16),
  // and nothing else makes them issue the store as one instruction: the __syncwarp does.
  __device__ static void writeLinePiece(uint64_t* line, int piece, uint64_t w0, uint64_t w1) {
    __syncwarp(lineGroup());
    asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(line + 2 * piece), "l"(w0), "l"(w1) : "memory");
  }

  // This thread's piece of a line once the line's flag (the last piece's second word) is
  // `flag`: the eight threads load their pieces together and vote, as NCCL's LL128 does, so
  // the line is read in one 128-byte load; the same answer for all eight.
  __device__ bool readLinePiece(const uint64_t* line, int piece, uint64_t flag, uint64_t* w0, uint64_t* w1,
                                const FifoEnd& end) {
    const unsigned group = lineGroup();
    const bool flagPiece = piece == kLineThreads - 1;
    const uint64_t* at = line + 2 * piece;
    uint64_t start = 0;
    for (uint32_t polls = 1;; ++polls) {
      uint64_t a, b;
      // The eight loads must be one instruction, or a piece loaded before the flag's could
      // be the previous step's while the flag is this one's (a torn line passed as whole).
      __syncwarp(group);
      asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(at) : "memory");
      if (__all_sync(group, !flagPiece || b == flag)) {
        *w0 = a;
        *w1 = b;
        return true;
      }
      if (polls % kPollsPerCheck != 0) continue;
      // One thread looks at what ends a wait, for the eight: they stop together.
      const bool stop = flagPiece && !keepWaiting(end, &start, [&] { return loadRelaxed(line + 15) == flag; });
      if (__any_sync(group, stop)) return false;
    }
  }

  // A malformed step (or an unusable slot): recorded as ncclInternalError.
  __device__ void fail(const FifoEnd& end, const char* what, long got, long expected) {
    record(ncclInternalError, end.peer, what, got, expected);
  }

  // The peer's step belongs to another call (step_stamps.h): the caller's error. The host
  // reports it with both sequence numbers (got: the peer's, expected: this rank's).
  __device__ void mismatch(const FifoEnd& end, const CallStamp& theirs, const CallStamp& mine, const char*) {
    record(ncclInvalidUsage, end.peer, "the ranks' calls do not match (sequence numbers: the peer's, this rank's)",
           static_cast<long>(theirs.seq), static_cast<long>(mine.seq));
  }

  // Records the launch's first failure; later ones are dropped. `code` is published last
  // (after a system fence), so whoever sees it nonzero also sees the other fields. Out of
  // line: it is called from some 390 places of a kernel, and runs once.
  __device__ __noinline__ void record(int code, int peer, const char* what, long got, long expected) {
    KernelStatus* s = args_.status;
    if (atomicCAS(&s->claim, 0, 1) != 0) return;
    s->peer = peer;
    s->block = static_cast<int>(blockIdx.x);
    s->got = got;
    s->expected = expected;
    int i = 0;
    for (; what[i] != '\0' && i + 1 < static_cast<int>(sizeof(s->what)); ++i) s->what[i] = what[i];
    s->what[i] = '\0';
    __threadfence_system();
    *reinterpret_cast<volatile int*>(&s->code) = code;
    __threadfence_system();
    // The peers learn of it now, not at their timeout: as the CPU executor's lanes do.
    breakEveryEnd<CudaExec>(args_.comm, brokenCauseOf(code));
  }

  __device__ bool failed() const { return *reinterpret_cast<const volatile int*>(&args_.status->code) != 0; }

 private:
  __device__ static uint64_t globalTimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  }

  // What ends a wait, looked at every kPollsPerCheck polls: an abort, another block's
  // failure, a broken connection (unless `delivered()`: what the wait is for arrived just
  // before), the peer gone past this call, the timeout (from `*start`, set at the first
  // look). False, the cause recorded, when the wait must stop.
  template <typename Delivered>
  __device__ bool keepWaiting(const FifoEnd& end, uint64_t* start, Delivered&& delivered) {
    if (*reinterpret_cast<const volatile uint32_t*>(args_.abortFlag) != 0) {
      record(ncclSystemError, end.peer, "aborted (ncclCommAbort or a failure elsewhere)", 0, 0);
      return false;
    }
    if (*reinterpret_cast<const volatile int*>(&args_.status->code) != 0) return false;  // another block failed
    if (*reinterpret_cast<const volatile uint32_t*>(&end.ctrl->broken) != 0) {
      if (delivered()) return true;
      record(ncclRemoteError, end.peer,
             "the connection to the peer broke (its work failed, it aborted, or it destroyed its communicator)", 0, 0);
      return false;
    }
    if (CallStamp theirs; callConflict<CudaExec>(end, &theirs)) {  // the peer went past this call
      mismatch(end, theirs, end.call, "");
      return false;
    }
    const uint64_t now = globalTimer();
    if (*start == 0) *start = now;
    if (args_.timeoutNs != 0 && now - *start > args_.timeoutNs) {
      record(ncclRemoteError, end.peer, "timed out: no progress from the peer within CHORUS_TIMEOUT", 0, 0);
      return false;
    }
    return true;
  }

  const KernelArgs& args_;
};

}  // namespace chorus
