// The board: a small AllReduce among the ranks of one host in one hop (CPU executor).
//
// A communicator of 3 or more ranks that all share this host's /dev/shm has a board (2 have
// the ring's pairAllReduce, one hop already; src/comm/board_setup.h): one block per rank
// in one shared segment (transport/board_memory.h), each a StepFifoControl and two slots of
// kBoardSlotBytes (a FIFO of two Simple slots with one writer, its rank, and every other
// rank a reader). Board call s (every AllReduce that goes on it, in call order: the same
// calls on every rank) runs:
//   - this rank writes pre(its input) into slot s % 2 of its own block, stamps step s
//     (step_stamps.h), publishes tail = s + 1 and announces the call as the block's sender,
//     finished;
//   - then, block by block in ring order, waits for tail > s on every other rank's block,
//     checks that block's stamp against its own call (a mismatch fails naming both calls),
//     and folds the n values, read in place, in the ring's order from rank 0: the expression
//     gatherAllReduce computes (ring_algorithms.h), so the same bits, deterministic mode's.
// A rank writes slot s % 2 again at call s + 2 only after it has read every rank's value of
// call s + 1, which each rank published only after it had read every value of call s: no
// slot is overwritten while a rank may still read it, and no reader counter is needed.
// Where ranks outnumber cores this is what pays: a rank needs to run once to write and once
// to read, where every hop of a ring waits for its receiver to be scheduled.
// Each wait is the executor's wait on the peer's block as a receiving FifoEnd: abort,
// timeout, sleeping in the kernel, a block marked broken, a peer's process gone, a peer
// announcing another call. The ring's ends still announce the call (the primitives'
// enterCall), so a peer that ran the call on the ring instead (a count mismatched across
// the limit) finds the conflict there and fails, marking the blocks broken, which ends
// this rank's waits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/common/platform.h"
#include "device/common/step_fifo.h"
#include "device/common/step_stamps.h"
#include "device/common/team_ops.h"
#include "device/common/work.h"  // ChannelView

namespace chorus {

// The largest AllReduce (its bytes) that goes on the board; measured on the CPU executor
// against the ring's programs (BENCHMARKS.md).
constexpr size_t kBoardSlotBytes = 4096;

// A block's layout: two Simple slots, no other protocol.
constexpr FifoLayout boardBlockLayout() {
  FifoLayout layout;
  layout.nSlots = 2;
  layout.slotBytes[static_cast<int>(Protocol::Simple)] = kBoardSlotBytes;
  return layout;
}

// Whether an AllReduce of `bytes` goes on the board: the communicator has one, the call
// runs on the ring, and its values fit a slot. The plan and the tuner both ask this.
CHORUS_HD constexpr bool goesOnBoard(bool hasBoard, Algorithm algo, size_t bytes) {
  return hasBoard && algo == Algorithm::Ring && bytes <= kBoardSlotBytes;
}

// An executor that runs the board: a team of one thread moving data (the CPU executor), not
// one that counts steps (step_counts.h).
template <typename Exec>
concept BoardRunner = Exec::kTeamOfOne && requires(const uint64_t* word) {
  Exec::loadAcquire(word);
};

// `board[r]`: rank r's block (this rank's own one writes). Every end's `step` is the number
// of board calls so far. `ch`: channel 0, whose ring connections the board call does not
// use. They must be left as a call on the ring would leave them: a step still waiting there
// belongs to an earlier call that this rank never received (two ranks that both called a
// Broadcast as its root only sent), which a call on the ring would have found. So each
// rank also publishes, in its block's `sizes[s % 2]` (a proxied FIFO's field; a block is
// never proxied), how many steps it had sent on its ring connection to the next rank, and
// the next rank compares that with what it has received. Slot by slot like the values: a
// rank may publish call s + 1, with more steps sent since, while another still reads s.
template <typename Exec, typename Prims, typename T, typename Op>
CHORUS_HD_OUTLINE void boardAllReduce(Exec& exec, Prims& prims, const Op& op, FifoEnd* const* board,
                                      const ChannelView& ch, int nranks, const T* src, T* dst, size_t count,
                                      const CallStamp& call) {
  static_assert(BoardRunner<Exec>, "the board's reader folds alone");
  const int* ring = ch.ringRanks;
  const int64_t bytes = static_cast<int64_t>(count * sizeof(T));
  FifoEnd& mine = *board[ring[0]];
  const uint64_t step = mine.step;
  auto sentWord = [step](const FifoEnd& block) { return reinterpret_cast<uint64_t*>(&block.ctrl->sizes[step & 1]); };
  teamCopy(exec, reinterpret_cast<T*>(mine.slot(Protocol::Simple, step)), src, count, op, true, false);
  Exec::storeRelaxed(sentWord(mine), ch.ringSend->step);
  stampStep<Exec>(mine, Protocol::Simple, bytes, call);
  Exec::storeRelease(&mine.ctrl->tail, step + 1);
  Exec::wakeSleepers(mine, &mine.ctrl->tail);
  stamp_detail::announce<Exec>(mine, call, true, step + 1);
  bool ok = true;
  for (int k = 1; k < nranks && ok; ++k) {
    FifoEnd& theirs = *board[ring[k]];
    theirs.call = call;
    ok = exec.waitUntil(
             [&theirs, step] { return static_cast<int64_t>(Exec::loadAcquire(&theirs.ctrl->tail) - step) > 0; },
             theirs) &&
         checkStepStamp<Exec>(exec, theirs, Protocol::Simple, bytes, call);
  }
  FifoEnd& ringRecv = *ch.ringRecv;
  const uint64_t sentToMe = ok ? Exec::loadRelaxed(sentWord(*board[ring[nranks - 1]])) : ringRecv.step;
  if (sentToMe != ringRecv.step) {
    ringRecv.call = call;
    // The stamp of the step left behind names its call, where it has one.
    if (checkStepStamp<Exec>(exec, ringRecv, Protocol::Simple, 0, call))
      exec.fail(ringRecv, "steps an earlier call sent on the ring were never received", static_cast<long>(sentToMe),
                static_cast<long>(ringRecv.step));
    ok = false;
  }
  if (ok) {
    int zero = 0;  // rank 0's place downstream of this rank
    while (ring[zero] != 0) ++zero;
    auto value = [&](int j) {
      return reinterpret_cast<const T*>(board[ring[(zero + j) % nranks]]->slot(Protocol::Simple, step));
    };
    prims.localReduce(dst, value(0), value(1), count, false, false, nranks == 2);
    for (int j = 2; j < nranks; ++j) prims.localReduce(dst, dst, value(j), count, false, false, j == nranks - 1);
  }
  for (int k = 0; k < nranks; ++k) board[ring[k]]->step = step + 1;
}

}  // namespace chorus
