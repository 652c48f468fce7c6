// Primitives of the Simple protocol: whole slots, one step per call, the step's
// completion signalled by the tail/head counters of a StepFifo.
//
// Every protocol's primitives class has this interface, so the algorithms
// (ring_algorithms.h, tree_algorithms.h) are templates over it:
//   kTeamOfOne, maxStepElems(), ok(), selfCopy, localReduce, send, copySend, recv,
//   recvReduceSend, recvReduceCopy, recvReduceCopySend, recvCopySend.
// A primitive reads from every end of its receive PeerSet (reducing them with the
// rank's own input where it reduces) and writes to every end of its send PeerSet.
//
// Values travelling through FIFOs are "pipeline values": the op's pre() (PreMulSum's
// multiply) is already applied, its post() (integer average's divide) is not, except
// where a primitive is documented to apply it to a final result.
// `Exec` is the executor's small interface (device/cpu/cpu_exec.h, device/cuda/cuda_exec.h):
//   uint64_t Exec::loadAcquire(const uint64_t*), void Exec::storeRelease(uint64_t*, uint64_t),
//   bool exec.waitUntil(cond, const FifoEnd&)   — false once the work must stop,
//   void exec.fail(const FifoEnd&, const char* what, long got, long expected),
// plus the team half of team_ops.h. Every thread of a team constructs the same primitives
// and makes the same calls. Thread 0 alone waits on and advances the FIFO counters; the
// data moves are shared out (teamCopy, teamReduce); team barriers order the two, so
// every thread sees the same ok() and the same step counters.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/common/platform.h"
#include "device/common/reduce_ops.h"
#include "device/common/step_fifo.h"
#include "device/common/step_stamps.h"
#include "device/common/team_ops.h"

namespace chorus {

template <typename T, typename Op, typename Exec>
class SimplePrimitives {
 public:
  static constexpr Protocol kProtocol = Protocol::Simple;
  static constexpr bool kTeamOfOne = Exec::kTeamOfOne;  // one thread runs the algorithm (team_ops.h)

  // `call`: the stamp of the item's call, which every step sent carries and every step
  // received must match (call_stamp.h). `offered`: a Send/Recv receiver's buffer, which it
  // offers its sender to write into (beginP2p); null: none.
  CHORUS_HD SimplePrimitives(Exec& exec, PeerSet recv, PeerSet send, const Op& op, const CallStamp& call = {},
                             T* offered = nullptr)
      : exec_(exec), recv_(recv), send_(send), op_(op), call_(call), offered_(offered) {
    if (exec_.tid() == 0) {
      if (offered_ != nullptr && recv_.count == 1 && send_.count == 0 && recv_.ends[0]->direct && call_.seq != 0) {
        // Before the call is announced: a sender that sees the announcement sees the offer.
        StepFifoControl* ctrl = recv_.ends[0]->ctrl;
        Exec::storeRelaxed(&ctrl->offered, reinterpret_cast<uint64_t>(offered_));
        Exec::storeRelease(&ctrl->offerSeq, call_.seq);
      }
      enterCall<Exec>(recv_, send_, call_);
    }
  }
  CHORUS_HD ~SimplePrimitives() {
    if (exec_.tid() == 0) leaveCall<Exec>(recv_, send_, call_);
  }
  SimplePrimitives(const SimplePrimitives&) = delete;
  SimplePrimitives& operator=(const SimplePrimitives&) = delete;

  // Elements one step can carry: the smallest slot among the connections; a Send/Recv in
  // place (beginP2p) is one step, whatever its size: its data use no slot.
  CHORUS_HD size_t maxStepElems() const {
    if (inPlace_) return SIZE_MAX / sizeof(T);
    size_t bytes = SIZE_MAX;
    for (int i = 0; i < recv_.count; ++i) bytes = bytes < slotBytes(recv_.ends[i]) ? bytes : slotBytes(recv_.ends[i]);
    for (int i = 0; i < send_.count; ++i) bytes = bytes < slotBytes(send_.ends[i]) ? bytes : slotBytes(send_.ends[i]);
    return bytes / sizeof(T);
  }

  // False once a wait was interrupted (abort, timeout, dead peer) or a step was malformed.
  CHORUS_HD bool ok() const { return ok_; }

  // Before the first step of a Send or Recv of `bytes`: on a direct FIFO (FifoEnd::direct),
  // a transfer larger than the slots hold moves in place: the sender waits for its receiver
  // to enter the call and, where it offered its buffer, writes all of it straight there in
  // one step (a step per slot would wake the idle receiver once per slot for nothing), and
  // the receiver copies nothing. Such a sender waits for its receiver anyway, so the wait
  // costs no time and makes no deadlock that was not there. Both ends decide alike: the
  // receiver from its own offer, the sender from finding it; each step's stamp says which
  // way it came (stampBytes), so a disagreement fails instead of passing unread slots off.
  CHORUS_HD_OUTLINE void beginP2p(size_t bytes) {
    if (recv_.count == 1 && send_.count == 0) {
      inPlace_ = offered_ != nullptr && inPlaceWorth(*recv_.ends[0], bytes);
      return;
    }
    if (send_.count != 1 || recv_.count != 0 || !inPlaceWorth(*send_.ends[0], bytes)) return;
    FifoEnd& s = *send_.ends[0];
    if (exec_.tid() == 0) s.directTo = takeOffer(s);
    ok_ = exec_.teamAll(ok_);
    inPlace_ = ok_ && s.directTo != 0;
    directOut_ = inPlace_ ? reinterpret_cast<T*>(s.directTo) : nullptr;
  }

  // dst = post(pre(src)): a communicator of one rank, no connection involved.
  CHORUS_HD_OUTLINE void selfCopy(const T* src, T* dst, size_t n) { teamCopy(exec_, dst, src, n, op_, true, true); }

  // dst = post?(pre?(a) (+) pre?(b)): values this rank holds, no connection involved.
  CHORUS_HD_OUTLINE void localReduce(T* dst, const T* a, const T* b, size_t n, bool preA, bool preB, bool post) {
    teamReduce(exec_, dst, a, b, n, op_, preA, preB, post);
  }

  // out = pre?(src)  (in place: the receiver's buffer = pre?(src))
  CHORUS_HD_OUTLINE void send(const T* src, size_t n, bool pre) {
    T* out = acquireSend();
    if (!out) return;
    if (inPlace_) {
      teamCopy(exec_, directOut_, src, n, op_, pre, false);
      directOut_ += n;
    } else {
      teamCopy(exec_, out, src, n, op_, pre, false);
    }
    publish(out, n, false);
  }

  // dst = src; out = src  (a rank's own block entering the ring, no op involved)
  CHORUS_HD_OUTLINE void copySend(const T* src, T* dst, size_t n) {
    T* out = acquireSend();
    if (!out) return;
    teamCopy(exec_, out, src, n, op_, false, false);
    if (dst != src) teamCopy(exec_, dst, src, n, op_, false, false);
    publish(out, n, false);
  }

  // dst = post?(in)  (in place: the sender wrote dst already)
  CHORUS_HD_OUTLINE void recv(T* dst, size_t n, bool post) {
    const T* in = acquireRecv(n);
    if (!in) return;
    if (!inPlace_ || post) teamCopy(exec_, dst, inPlace_ ? dst : in, n, op_, false, post);
    publish(nullptr, n, true);
  }

  // out = in... (+) pre(src)
  CHORUS_HD_OUTLINE void recvReduceSend(const T* src, size_t n) {
    const T* in = acquireRecv(n);
    if (!in) return;
    T* out = acquireSend();
    if (!out) return;
    reduceAll(out, in, src, n, false);
    publish(out, n, true);
  }

  // dst = post(in... (+) pre(src))
  CHORUS_HD_OUTLINE void recvReduceCopy(const T* src, T* dst, size_t n) {
    const T* in = acquireRecv(n);
    if (!in) return;
    reduceAll(dst, in, src, n, true);
    publish(nullptr, n, true);
  }

  // dst = out = post(in... (+) pre(src)): the final value, sent on as it is.
  CHORUS_HD_OUTLINE void recvReduceCopySend(const T* src, T* dst, size_t n) {
    const T* in = acquireRecv(n);
    if (!in) return;
    T* out = acquireSend();
    if (!out) return;
    reduceAll(out, in, src, n, true);
    teamCopy(exec_, dst, out, n, op_, false, false);
    publish(out, n, true);
  }

  // dst = out = in
  CHORUS_HD_OUTLINE void recvCopySend(T* dst, size_t n) {
    const T* in = acquireRecv(n);
    if (!in) return;
    T* out = acquireSend();
    if (!out) return;
    teamCopy(exec_, out, in, n, op_, false, false);
    teamCopy(exec_, dst, in, n, op_, false, false);
    publish(out, n, true);
  }

  // out = in  (passed on, kept nowhere: an ordered reduction's final on its way to the root)
  CHORUS_HD_OUTLINE void recvSend(size_t n) {
    const T* in = acquireRecv(n);
    if (!in) return;
    T* out = acquireSend();
    if (!out) return;
    teamCopy(exec_, out, in, n, op_, false, false);
    publish(out, n, true);
  }

 private:
  static CHORUS_HD size_t slotBytes(const FifoEnd* e) { return e->slotBytes[static_cast<int>(kProtocol)]; }

  // beginP2p's rule: a direct FIFO, a stamped call (the offer is keyed by its number), and
  // more bytes than the slots hold.
  CHORUS_HD bool inPlaceWorth(const FifoEnd& e, size_t bytes) const {
    return e.direct && call_.seq != 0 && bytes > slotBytes(&e) * static_cast<size_t>(e.nSlots);
  }

  // Sender, thread 0: waits for the receiver to enter this call; the buffer it offered for
  // it, or 0. A receiver in another call is a mismatch (as a step of it would be).
  CHORUS_HD uint64_t takeOffer(const FifoEnd& s) {
    PeerCall at{};
    ok_ = exec_.waitUntil(
        [&] { return stamp_detail::readPeerCall<Exec>(&s.ctrl->receiver, &at) && at.call.seq >= call_.seq; }, s);
    if (!ok_) return 0;
    if (!stampsMatch(call_, at.call)) {
      exec_.mismatch(s, at.call, call_, "its receive is another call than this send");
      ok_ = false;
      return 0;
    }
    return Exec::loadAcquire(&s.ctrl->offerSeq) == call_.seq ? Exec::loadRelaxed(&s.ctrl->offered) : 0;
  }

  // A step's bytes as its stamp carries them: negative (-bytes - 1) for a step moved in place.
  CHORUS_HD int64_t stampBytes(size_t n) const {
    const int64_t bytes = static_cast<int64_t>(n * sizeof(T));
    return inPlace_ ? -bytes - 1 : bytes;
  }

  // Reduces every received slot with pre(src) into dst (post() applied when asked).
  CHORUS_HD void reduceAll(T* dst, const T* in, const T* src, size_t n, bool post) {
    if (recv_.count == 1) {
      teamReduce(exec_, dst, in, src, n, op_, false, true, post);
      return;
    }
    // Each thread rereads only the elements it wrote itself, so no barrier is needed between.
    teamReduce(exec_, dst, in, src, n, op_, false, true, false);
    for (int i = 1; i < recv_.count; ++i) {
      const T* more = reinterpret_cast<const T*>(recv_.ends[i]->slot(kProtocol, recv_.ends[i]->step));
      teamReduce(exec_, dst, dst, more, n, op_, false, false, post && i == recv_.count - 1);
    }
  }

  // Waits until every send end has a free slot; returns the first end's slot.
  CHORUS_HD T* acquireSend() {
    if (!ok_) return nullptr;
    if (exec_.tid() == 0) {
      for (int i = 0; i < send_.count && ok_; ++i) ok_ = acquireSlot(exec_, *send_.ends[i]);
    }
    ok_ = exec_.teamAll(ok_);
    return ok_ ? reinterpret_cast<T*>(send_.ends[0]->slot(kProtocol, send_.ends[0]->step)) : nullptr;
  }

  // Waits until every receive end has step data; returns the first end's slot.
  CHORUS_HD const T* acquireRecv(size_t n) {
    if (!ok_) return nullptr;
    if (exec_.tid() == 0) {
      for (int i = 0; i < recv_.count && ok_; ++i) {
        FifoEnd& r = *recv_.ends[i];
        ok_ = awaitStep(exec_, r) && checkStepStamp(exec_, r, kProtocol, stampBytes(n), call_);
      }
    }
    ok_ = exec_.teamAll(ok_);
    return ok_ ? reinterpret_cast<const T*>(recv_.ends[0]->slot(kProtocol, recv_.ends[0]->step)) : nullptr;
  }

  // Ends a step: copies the first send slot `out` (if any) to the other send ends, then,
  // once the whole team is done with the slots, releases the receive slots (`received`)
  // and publishes the step on every send end.
  CHORUS_HD void publish(const T* out, size_t n, bool received) {
    for (int i = 1; out && i < send_.count; ++i) {
      FifoEnd& s = *send_.ends[i];
      teamCopy(exec_, reinterpret_cast<T*>(s.slot(kProtocol, s.step)), out, n, op_, false, false);
    }
    exec_.teamSync();
    if (exec_.tid() == 0) {
      for (int i = 0; received && i < recv_.count; ++i) {
        FifoEnd& r = *recv_.ends[i];
        publishCounter<Exec>(r, &r.ctrl->head, ++r.step);
      }
      for (int i = 0; out && i < send_.count; ++i) {
        FifoEnd& s = *send_.ends[i];
        s.ctrl->sizes[s.step & static_cast<uint64_t>(s.nSlots - 1)] =
            stampStep<Exec>(s, kProtocol, stampBytes(n), call_);
        publishCounter<Exec>(s, &s.ctrl->tail, ++s.step);
      }
    }
    exec_.teamSync();  // the new step counters, before any thread computes a slot from them
  }

  Exec& exec_;
  PeerSet recv_;
  PeerSet send_;
  Op op_;
  CallStamp call_;
  T* offered_ = nullptr;
  bool inPlace_ = false;    // this Send or Recv moves in place (beginP2p)
  T* directOut_ = nullptr;  // sender in place: where the next step goes in the receiver's buffer
  bool ok_ = true;
};

}  // namespace chorus
