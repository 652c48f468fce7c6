// How many steps a work item moves on each connection end it touches, known before it
// runs: the item's program (programs.h) run over primitives that count instead of moving
// data. Every primitive call is one step on each end of its PeerSet (simple_primitives.h:
// the algorithms slice by maxStepElems), so the counts are exact by construction, and
// stay so whenever an algorithm changes. A profiler plugin's ProxyOp events need them:
// NCCL's descriptor carries nSteps when the operation starts.
//
// Host only (dispatchType): run where a team of one thread runs the programs, the CPU
// executor, whose choices (the gather path of a small AllReduce) the counts follow.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/common/datatypes.h"
#include "device/common/ll128_primitives.h"
#include "device/common/ll_primitives.h"
#include "device/common/programs.h"
#include "device/common/work.h"

namespace chorus {

// The steps counted, per end, in the order the ends were first met.
struct StepTally {
  struct Entry {
    const FifoEnd* end;
    bool sending;  // the program sends on it (otherwise receives)
    uint64_t steps;
  };
  static constexpr int kMaxEnds = 2 * kMaxPeers + 2;  // a tree item's up and down sets
  Entry entries[kMaxEnds] = {};
  int count = 0;

  void add(const PeerSet& set, bool sending) {
    for (int i = 0; i < set.count; ++i) {
      int k = 0;
      while (k < count && entries[k].end != set.ends[i]) ++k;
      if (k == count) {
        if (count == kMaxEnds) continue;  // more ends than any program has
        entries[count++] = Entry{set.ends[i], sending, 0};
      }
      ++entries[k].steps;
    }
  }
};

namespace step_counts {

struct CountingExec {
  static constexpr bool kTeamOfOne = true;
  StepTally* tally;
  Protocol proto;
};

// Elements one step of `proto` carries in `e`'s slots, as that protocol's primitives say.
inline size_t stepBytes(const FifoEnd& e, Protocol proto) {
  switch (proto) {
    case Protocol::LL:
      return linePayloadBytes<LLFormat>(e);
    case Protocol::LL128:
      return linePayloadBytes<LL128Format>(e);
    default:
      return e.slotBytes[static_cast<int>(Protocol::Simple)];
  }
}

// The primitives interface (simple_primitives.h), counting.
template <typename T, typename Op, typename Exec>
class CountingPrimitives {
 public:
  static constexpr bool kTeamOfOne = Exec::kTeamOfOne;
  CountingPrimitives(Exec& exec, PeerSet recv, PeerSet send, const Op&, const CallStamp& = {}, T* = nullptr)
      : exec_(exec), recv_(recv), send_(send) {}

  size_t maxStepElems() const {
    size_t bytes = SIZE_MAX;
    for (int i = 0; i < recv_.count; ++i) bytes = minOf(bytes, stepBytes(*recv_.ends[i], exec_.proto));
    for (int i = 0; i < send_.count; ++i) bytes = minOf(bytes, stepBytes(*send_.ends[i], exec_.proto));
    return bytes / sizeof(T);
  }
  bool ok() const { return true; }
  void beginP2p(size_t) {}  // in place or not, the same steps
  void selfCopy(const T*, T*, size_t) {}
  void localReduce(T*, const T*, const T*, size_t, bool, bool, bool) {}
  void send(const T*, size_t, bool) { exec_.tally->add(send_, true); }
  void copySend(const T*, T*, size_t) { exec_.tally->add(send_, true); }
  void recv(T*, size_t, bool) { exec_.tally->add(recv_, false); }
  void recvReduceCopy(const T*, T*, size_t) { exec_.tally->add(recv_, false); }
  void recvReduceSend(const T*, size_t) { both(); }
  void recvReduceCopySend(const T*, T*, size_t) { both(); }
  void recvCopySend(T*, size_t) { both(); }
  void recvSend(size_t) { both(); }

 private:
  static size_t minOf(size_t a, size_t b) { return a < b ? a : b; }
  void both() {
    exec_.tally->add(recv_, false);
    exec_.tally->add(send_, true);
  }
  Exec& exec_;
  PeerSet recv_;
  PeerSet send_;
};

struct NoOp {};

}  // namespace step_counts

// Adds the steps `w` will move on each end to `tally`. The program depends on the data
// type only through its size, so one element type per size stands for all.
inline void countItemSteps(const CommView& comm, const WorkItem& w, StepTally* tally) {
  step_counts::CountingExec exec{tally, w.proto};
  const step_counts::NoOp op;
  using programs::runItem;
  switch (typeSize(w.dtype)) {
    case 1:
      runItem<step_counts::CountingPrimitives, uint8_t>(exec, comm, w, op);
      break;
    case 2:
      runItem<step_counts::CountingPrimitives, uint16_t>(exec, comm, w, op);
      break;
    case 4:
      runItem<step_counts::CountingPrimitives, uint32_t>(exec, comm, w, op);
      break;
    default:
      runItem<step_counts::CountingPrimitives, uint64_t>(exec, comm, w, op);
      break;
  }
}

}  // namespace chorus
