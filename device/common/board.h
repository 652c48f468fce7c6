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
// use. They must be left as a call on the ring would leave them: a step still waiting on
// one belongs to an earlier call that its receiver never received (two ranks that both
// called a Broadcast as its root only sent), which a call on the ring would have found. So
// each rank also publishes, with its value, how many steps it had sent on its ring
// connection to the next rank and received on the one from the previous rank (in its
// block's `sizes[]`, a proxied FIFO's field; a block is never proxied); once every value is
// here, every rank compares every link alike, so all of them fail in this call where one
// link left steps behind. Slot by slot like the values: a rank may publish call s + 1, with
// more steps since, while another still reads call s. Channel 0's connections only: its
// lane runs this call in order with the calls before it, where the other channels' lanes
// may be anywhere in the group's other calls meanwhile (their counts differ from rank to
// rank); a step left on another channel fails the next call that uses that channel.
// Exec also needs staleRingSteps(sender, receiver, sent, received, call): records
// ncclInvalidUsage with a WARN naming the link.
template <typename Exec, typename Prims, typename T, typename Op>
CHORUS_HD_OUTLINE void boardAllReduce(Exec& exec, Prims& prims, const Op& op, FifoEnd* const* board,
                                      const ChannelView& ch, int nranks, const T* src, T* dst, size_t count,
                                      const CallStamp& call) {
  static_assert(BoardRunner<Exec>, "the board's reader folds alone");
  const int* ring = ch.ringRanks;
  const int64_t bytes = static_cast<int64_t>(count * sizeof(T));
  FifoEnd& mine = *board[ring[0]];
  const uint64_t step = mine.step;
  // sizes[s % 2]: ring steps sent to the next rank; sizes[2 + s % 2]: received from the previous.
  auto ringCount = [step](const FifoEnd& block, bool received) {
    return reinterpret_cast<uint64_t*>(&block.ctrl->sizes[(received ? 2 : 0) + (step & 1)]);
  };
  teamCopy(exec, reinterpret_cast<T*>(mine.slot(Protocol::Simple, step)), src, count, op, true, false);
  Exec::storeRelaxed(ringCount(mine, false), ch.ringSend->step);
  Exec::storeRelaxed(ringCount(mine, true), ch.ringRecv->step);
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
  for (int k = 0; k < nranks && ok; ++k) {  // the ring's link into ring[k]
    const int sender = ring[(k + nranks - 1) % nranks];
    const uint64_t sent = Exec::loadRelaxed(ringCount(*board[sender], false));
    const uint64_t received = Exec::loadRelaxed(ringCount(*board[ring[k]], true));
    if (sent == received) continue;
    exec.staleRingSteps(sender, ring[k], sent, received, call);
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
