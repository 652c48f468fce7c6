// Stamping Simple steps with their call and checking the stamps (call_stamp.h; LL and
// LL128 carry theirs in lines, line_pipeline.h), and the calls each end of a connection
// announces, which long waits compare: written once for both executors.
//
// Exec needs, besides the primitives' interface: Exec::fenceRelease() and
// Exec::fenceAcquire() (ordering of plain stores and loads around a flag), and
// exec.mismatch(end, theirs, mine, why), which records ncclInvalidUsage naming both calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/common/call_stamp.h"
#include "device/common/platform.h"
#include "device/common/step_fifo.h"

namespace chorus {

namespace stamp_detail {

constexpr size_t kPeerCallWords = sizeof(PeerCall) / sizeof(uint64_t);
static_assert(sizeof(PeerCall) % sizeof(uint64_t) == 0, "PeerCall moves as words");

CHORUS_HD StepStamp* stampSlotOf(const FifoEnd& e) {
  return &e.ctrl->stamps[e.step & static_cast<uint64_t>(e.nSlots - 1)].stamp;
}

// A PeerCall is a seqlock: an odd generation while its end rewrites it.
template <typename Exec>
CHORUS_HD void writePeerCall(PeerCall* record, const CallStamp& call, uint64_t endStep) {
  const PeerCall next{call, endStep, 0};
  uint64_t* words = reinterpret_cast<uint64_t*>(record);
  const uint64_t generation = Exec::loadRelaxed(&record->generation);
  Exec::storeRelaxed(&record->generation, generation + 1);
  Exec::fenceRelease();
  const uint64_t* from = reinterpret_cast<const uint64_t*>(&next);
  for (size_t i = 0; i + 1 < kPeerCallWords; ++i) Exec::storeRelaxed(words + i, from[i]);
  Exec::storeRelease(&record->generation, generation + 2);
}

// False when the other end was rewriting it, or has announced nothing yet.
template <typename Exec>
CHORUS_HD bool readPeerCall(const PeerCall* record, PeerCall* out) {
  const uint64_t before = Exec::loadAcquire(&record->generation);
  if (before & 1) return false;
  const uint64_t* words = reinterpret_cast<const uint64_t*>(record);
  uint64_t* to = reinterpret_cast<uint64_t*>(out);
  for (size_t i = 0; i < kPeerCallWords; ++i) to[i] = Exec::loadRelaxed(words + i);
  Exec::fenceAcquire();
  return Exec::loadRelaxed(&record->generation) == before && out->call.seq != 0;
}

template <typename Exec>
CHORUS_HD void announce(FifoEnd& e, const CallStamp& call, bool sending, uint64_t endStep) {
  e.call = call;
  e.sending = sending;
  // On a proxied FIFO the record stays in this rank's memory; the proxy relays it (net_connection.h).
  if (call.seq != 0) writePeerCall<Exec>(sending ? &e.ctrl->sender : &e.ctrl->receiver, call, endStep);
}

}  // namespace stamp_detail

// A primitives object's start and end of a work item (thread 0): each of its ends learns
// the call it serves and announces it to the other end, then that it is done.
template <typename Exec>
CHORUS_HD void enterCall(const PeerSet& recv, const PeerSet& send, const CallStamp& call) {
  for (int i = 0; i < recv.count; ++i) stamp_detail::announce<Exec>(*recv.ends[i], call, false, 0);
  for (int i = 0; i < send.count; ++i) stamp_detail::announce<Exec>(*send.ends[i], call, true, 0);
}
template <typename Exec>
CHORUS_HD void leaveCall(const PeerSet& recv, const PeerSet& send, const CallStamp& call) {
  for (int i = 0; i < recv.count; ++i) stamp_detail::announce<Exec>(*recv.ends[i], call, false, recv.ends[i]->step + 1);
  for (int i = 0; i < send.count; ++i) stamp_detail::announce<Exec>(*send.ends[i], call, true, send.ends[i]->step + 1);
}

// Sender (Simple): stamps end `s`'s current step, before the step is published. Returns the
// bytes a proxied FIFO sends for the step (payload, padding, trailer: its `sizes` entry).
template <typename Exec>
CHORUS_HD int64_t stampStep(const FifoEnd& s, Protocol p, int64_t bytes, const CallStamp& call) {
  if (s.proxied) {
    const StepStamp stamp{s.step + 1, bytes, call};
    const size_t at = trailerOffset(static_cast<size_t>(bytes));
    __builtin_memcpy(s.slot(p, s.step) + at, &stamp, sizeof(stamp));
    return static_cast<int64_t>(at + sizeof(stamp));
  }
  StepStamp* slot = stamp_detail::stampSlotOf(s);
  slot->bytes = bytes;
  slot->call = call;
  Exec::storeRelease(&slot->step, s.step + 1);  // last: a receiver that sees it sees the rest
  return bytes;
}

// Receiver (Simple): checks that end `r`'s current step, already published (tail),
// belongs to this rank's call `mine` and carries `bytes`. False (recorded) on a mismatch
// or a malformed step.
template <typename Exec>
CHORUS_HD bool checkStepStamp(Exec& exec, const FifoEnd& r, Protocol p, int64_t bytes, const CallStamp& mine) {
  StepStamp got;
  if (r.proxied) {
    const int64_t wire = r.ctrl->sizes[r.step & static_cast<uint64_t>(r.nSlots - 1)];
    const int64_t room = static_cast<int64_t>(r.slotStride[static_cast<int>(p)]);
    if (wire < static_cast<int64_t>(sizeof(StepStamp)) || wire > room || (wire - sizeof(StepStamp)) % 8 != 0) {
      exec.fail(r, "malformed step (no stamp behind its payload)", static_cast<long>(wire),
                static_cast<long>(trailerOffset(static_cast<size_t>(bytes)) + sizeof(StepStamp)));
      return false;
    }
    __builtin_memcpy(&got, r.slot(p, r.step) + (wire - static_cast<int64_t>(sizeof(StepStamp))), sizeof(got));
  } else {
    const StepStamp* slot = stamp_detail::stampSlotOf(r);
    got.step = Exec::loadAcquire(&slot->step);
    got.bytes = slot->bytes;
    got.call = slot->call;
  }
  if (got.step != r.step + 1) {  // sent, but not as a Simple step: the sender is in another call
    PeerCall at;
    if (!r.proxied && stamp_detail::readPeerCall<Exec>(&r.ctrl->sender, &at)) {
      exec.mismatch(r, at.call, mine, "it sent this step with another protocol");
    } else {
      exec.fail(r, "malformed step (stamped for another step)", static_cast<long>(got.step - 1),
                static_cast<long>(r.step));
    }
    return false;
  }
  if (!stampsMatch(got.call, mine)) {
    exec.mismatch(r, got.call, mine, "its step belongs to another call");
    return false;
  }
  if (got.bytes != bytes) {
    exec.fail(r, "step size mismatch (send and receive counts differ)", static_cast<long>(got.bytes),
              static_cast<long>(bytes));
    return false;
  }
  return true;
}

// For a long wait on end `e`: true when the other end has gone past this rank's call
// without doing what the wait needs, so it would never end. `theirs` is that end's call.
// Waiting for a step, the sender: sent the step stamped for another call (one whose
// protocol publishes it differently), finished the same call without sending it, or is in
// another call whose number is not below this one's without having sent it. Waiting for a
// free slot, the receiver: finished the same call (it will consume nothing more of it), or
// is in another call whose number is not below this one's. The other end not yet at this
// call is merely slow: false. The record is read before the counter or stamp the wait is
// for: an end stamps and publishes before it announces that it moved on, so what the
// record says was already done. On a proxied FIFO the record is the one the proxies
// relayed (net_connection.h), which keeps that order for the sender's; a slot there is
// freed by the local proxy's send, not by the receiver, so a receiver done with the same
// call proves nothing, and a step that arrived is checked when it is read. A call of
// another communicator sharing the connection (another numbering) is in no known order:
// only its steps, when they come, show a conflict.
template <typename Exec>
CHORUS_HD bool callConflict(const FifoEnd& e, CallStamp* theirs) {
  const CallStamp& mine = e.call;
  if (mine.seq == 0) return false;
  PeerCall at;
  const bool announced = stamp_detail::readPeerCall<Exec>(e.sending ? &e.ctrl->receiver : &e.ctrl->sender, &at);
  if (e.sending) {
    if (!announced) return false;
    if (e.step - Exec::loadAcquire(&e.ctrl->head) < static_cast<uint64_t>(e.nSlots)) return false;  // a slot is free
    *theirs = at.call;
    if (stampsMatch(mine, at.call)) return !e.proxied && at.endStep != 0;
    return sameNumbering(at.call, mine) && at.call.seq >= mine.seq;
  }
  if (static_cast<int64_t>(Exec::loadAcquire(&e.ctrl->tail) - e.step) > 0) {
    if (e.proxied) return false;
    // The step was sent (every protocol publishes tail). A Simple step says whose it is; one
    // of another call would leave an LL or LL128 receiver waiting for lines: a conflict.
    const StepStamp* slot = stamp_detail::stampSlotOf(e);
    if (Exec::loadAcquire(&slot->step) != e.step + 1) return false;
    *theirs = slot->call;
    return !stampsMatch(*theirs, mine);
  }
  if (!announced) return false;
  *theirs = at.call;
  if (stampsMatch(at.call, mine)) return at.endStep != 0 && at.endStep - 1 <= e.step;
  return sameNumbering(at.call, mine) && at.call.seq >= mine.seq;
}

}  // namespace chorus
