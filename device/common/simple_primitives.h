// Primitives of the Simple protocol: whole slots, one step per call, the step's
// completion signalled by the tail/head counters of a StepFifo.
//
// Every protocol's primitives class has this interface, so the algorithms
// (ring_algorithms.h, tree_algorithms.h) are templates over it:
//   maxStepElems(), ok(), selfCopy, send, copySend, recv, recvReduceSend,
//   recvReduceCopy, recvReduceCopySend, recvCopySend.
// A primitive reads from every end of its receive PeerSet (reducing them with the
// rank's own input where it reduces) and writes to every end of its send PeerSet.
//
// Values travelling through FIFOs are "pipeline values": the op's pre() (PreMulSum's
// multiply) is already applied, its post() (integer average's divide) is not, except
// where a primitive is documented to apply it to a final result.
// `Exec` is the executor's small interface (device/cpu/cpu_exec.h, later device/cuda):
//   uint64_t Exec::loadAcquire(const uint64_t*), void Exec::storeRelease(uint64_t*, uint64_t),
//   bool exec.waitUntil(cond, const FifoEnd&)   — false once the work must stop,
//   void exec.fail(const FifoEnd&, const char* what, long got, long expected).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/platform.h"
#include "common/reduce_ops.h"
#include "common/step_fifo.h"

namespace chorus {

template <typename T, typename Op, typename Exec>
class SimplePrimitives {
 public:
  static constexpr Protocol kProtocol = Protocol::Simple;

  SimplePrimitives(Exec& exec, PeerSet recv, PeerSet send, const Op& op)
      : exec_(exec), recv_(recv), send_(send), op_(op) {}

  // Elements one step can carry: the smallest slot among the connections.
  CHORUS_HD size_t maxStepElems() const {
    size_t bytes = SIZE_MAX;
    for (int i = 0; i < recv_.count; ++i) bytes = bytes < slotBytes(recv_.ends[i]) ? bytes : slotBytes(recv_.ends[i]);
    for (int i = 0; i < send_.count; ++i) bytes = bytes < slotBytes(send_.ends[i]) ? bytes : slotBytes(send_.ends[i]);
    return bytes / sizeof(T);
  }

  // False once a wait was interrupted (abort, timeout, dead peer) or a step was malformed.
  CHORUS_HD bool ok() const { return ok_; }

  // dst = post(pre(src)): a communicator of one rank, no connection involved.
  CHORUS_HD void selfCopy(const T* src, T* dst, size_t n) { copyArray(dst, src, n, op_, true, true); }

  // out = pre?(src)
  CHORUS_HD void send(const T* src, size_t n, bool pre) {
    T* out = acquireSend();
    if (!out) return;
    copyArray(out, src, n, op_, pre, false);
    finishSend(out, n);
  }

  // dst = src; out = src  (a rank's own block entering the ring, no op involved)
  CHORUS_HD void copySend(const T* src, T* dst, size_t n) {
    T* out = acquireSend();
    if (!out) return;
    copyArray(out, src, n, op_, false, false);
    if (dst != src) copyArray(dst, out, n, op_, false, false);
    finishSend(out, n);
  }

  // dst = post?(in)
  CHORUS_HD void recv(T* dst, size_t n, bool post) {
    const T* in = acquireRecv(n);
    if (!in) return;
    copyArray(dst, in, n, op_, false, post);
    postRecv();
  }

  // out = in... (+) pre(src)
  CHORUS_HD void recvReduceSend(const T* src, size_t n) {
    const T* in = acquireRecv(n);
    if (!in) return;
    T* out = acquireSend();
    if (!out) return;
    reduceAll(out, in, src, n, false);
    postRecv();
    finishSend(out, n);
  }

  // dst = post(in... (+) pre(src))
  CHORUS_HD void recvReduceCopy(const T* src, T* dst, size_t n) {
    const T* in = acquireRecv(n);
    if (!in) return;
    reduceAll(dst, in, src, n, true);
    postRecv();
  }

  // dst = out = post(in... (+) pre(src)): the final value, sent on as it is.
  CHORUS_HD void recvReduceCopySend(const T* src, T* dst, size_t n) {
    const T* in = acquireRecv(n);
    if (!in) return;
    T* out = acquireSend();
    if (!out) return;
    reduceAll(out, in, src, n, true);
    copyArray(dst, out, n, op_, false, false);
    postRecv();
    finishSend(out, n);
  }

  // dst = out = in
  CHORUS_HD void recvCopySend(T* dst, size_t n) {
    const T* in = acquireRecv(n);
    if (!in) return;
    T* out = acquireSend();
    if (!out) return;
    copyArray(out, in, n, op_, false, false);
    copyArray(dst, out, n, op_, false, false);
    postRecv();
    finishSend(out, n);
  }

 private:
  static CHORUS_HD size_t slotBytes(const FifoEnd* e) { return e->slotBytes[static_cast<int>(kProtocol)]; }

  // Reduces every received slot with pre(src) into dst (post() applied when asked).
  CHORUS_HD void reduceAll(T* dst, const T* in, const T* src, size_t n, bool post) {
    if (recv_.count == 1) {
      reduceArrays(dst, in, src, n, op_, false, true, post);
      return;
    }
    reduceArrays(dst, in, src, n, op_, false, true, false);
    for (int i = 1; i < recv_.count; ++i) {
      const T* more = reinterpret_cast<const T*>(recv_.ends[i]->slot(kProtocol, recv_.ends[i]->step));
      reduceArrays(dst, dst, more, n, op_, false, false, post && i == recv_.count - 1);
    }
  }

  // Waits until every send end has a free slot; returns the first end's slot.
  CHORUS_HD T* acquireSend() {
    if (!ok_) return nullptr;
    for (int i = 0; i < send_.count && ok_; ++i) ok_ = acquireSlot(exec_, *send_.ends[i]);
    return ok_ ? reinterpret_cast<T*>(send_.ends[0]->slot(kProtocol, send_.ends[0]->step)) : nullptr;
  }

  // Copies the first slot to the other send ends, then publishes the step on all.
  CHORUS_HD void finishSend(const T* out, size_t n) {
    for (int i = 0; i < send_.count; ++i) {
      FifoEnd& s = *send_.ends[i];
      if (i > 0) copyArray(reinterpret_cast<T*>(s.slot(kProtocol, s.step)), out, n, op_, false, false);
      s.ctrl->sizes[s.step & static_cast<uint64_t>(s.nSlots - 1)] = static_cast<int64_t>(n * sizeof(T));
      Exec::storeRelease(&s.ctrl->tail, ++s.step);
    }
  }

  // Waits until every receive end has step data; returns the first end's slot.
  CHORUS_HD const T* acquireRecv(size_t n) {
    if (!ok_) return nullptr;
    for (int i = 0; i < recv_.count && ok_; ++i) {
      FifoEnd& r = *recv_.ends[i];
      ok_ = awaitStep(exec_, r);
      if (!ok_) return nullptr;
      const int64_t got = r.ctrl->sizes[r.step & static_cast<uint64_t>(r.nSlots - 1)];
      if (got != static_cast<int64_t>(n * sizeof(T))) {
        exec_.fail(r, "step size mismatch (send and receive counts differ)", got, static_cast<long>(n * sizeof(T)));
        ok_ = false;
        return nullptr;
      }
    }
    return reinterpret_cast<const T*>(recv_.ends[0]->slot(kProtocol, recv_.ends[0]->step));
  }

  CHORUS_HD void postRecv() {
    for (int i = 0; i < recv_.count; ++i) {
      FifoEnd& r = *recv_.ends[i];
      Exec::storeRelease(&r.ctrl->head, ++r.step);
    }
  }

  Exec& exec_;
  PeerSet recv_;
  PeerSet send_;
  Op op_;
  bool ok_ = true;
};

}  // namespace chorus
