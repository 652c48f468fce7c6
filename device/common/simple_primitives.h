// Primitives of the Simple protocol: whole slots, one step per call, the step's
// completion signalled by the tail/head counters of a StepFifo.
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
  SimplePrimitives(Exec& exec, FifoEnd* recvEnd, FifoEnd* sendEnd, const Op& op)
      : exec_(exec), recv_(recvEnd), send_(sendEnd), op_(op) {}

  // Elements one step can carry: the smaller slot of the two connections.
  CHORUS_HD size_t maxStepElems() const {
    size_t bytes = SIZE_MAX;
    if (recv_) bytes = recv_->slotBytes;
    if (send_ && send_->slotBytes < bytes) bytes = send_->slotBytes;
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
    postSend(n);
  }

  // dst = src; out = src  (a rank's own block entering the ring, no op involved)
  CHORUS_HD void copySend(const T* src, T* dst, size_t n) {
    T* out = acquireSend();
    if (!out) return;
    copyArray(out, src, n, op_, false, false);
    if (dst != src) copyArray(dst, out, n, op_, false, false);
    postSend(n);
  }

  // dst = post?(in)
  CHORUS_HD void recv(T* dst, size_t n, bool post) {
    const T* in = acquireRecv(n);
    if (!in) return;
    copyArray(dst, in, n, op_, false, post);
    postRecv();
  }

  // out = in (+) pre(src)
  CHORUS_HD void recvReduceSend(const T* src, size_t n) {
    const T* in = acquireRecv(n);
    if (!in) return;
    T* out = acquireSend();
    if (!out) return;
    reduceArrays(out, in, src, n, op_, false, true, false);
    postRecv();
    postSend(n);
  }

  // dst = post(in (+) pre(src))
  CHORUS_HD void recvReduceCopy(const T* src, T* dst, size_t n) {
    const T* in = acquireRecv(n);
    if (!in) return;
    reduceArrays(dst, in, src, n, op_, false, true, true);
    postRecv();
  }

  // dst = out = post(in (+) pre(src)): the final value, sent on as it is.
  CHORUS_HD void recvReduceCopySend(const T* src, T* dst, size_t n) {
    const T* in = acquireRecv(n);
    if (!in) return;
    T* out = acquireSend();
    if (!out) return;
    reduceArrays(out, in, src, n, op_, false, true, true);
    copyArray(dst, out, n, op_, false, false);
    postRecv();
    postSend(n);
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
    postSend(n);
  }

 private:
  CHORUS_HD T* acquireSend() {
    if (!ok_) return nullptr;
    FifoEnd& s = *send_;
    const uint64_t step = s.step;
    const int nSlots = s.nSlots;
    StepFifoControl* ctrl = s.ctrl;
    // Differences, not sums, so the comparisons hold across a 64-bit wrap of the counters.
    ok_ = exec_.waitUntil(
        [ctrl, step, nSlots] { return step - Exec::loadAcquire(&ctrl->head) < static_cast<uint64_t>(nSlots); }, s);
    return ok_ ? reinterpret_cast<T*>(s.slot(step)) : nullptr;
  }

  CHORUS_HD void postSend(size_t n) {
    FifoEnd& s = *send_;
    s.ctrl->sizes[s.step % s.nSlots] = static_cast<int64_t>(n * sizeof(T));
    Exec::storeRelease(&s.ctrl->tail, ++s.step);
  }

  CHORUS_HD const T* acquireRecv(size_t n) {
    if (!ok_) return nullptr;
    FifoEnd& r = *recv_;
    const uint64_t step = r.step;
    StepFifoControl* ctrl = r.ctrl;
    ok_ = exec_.waitUntil([ctrl, step] { return static_cast<int64_t>(Exec::loadAcquire(&ctrl->tail) - step) > 0; }, r);
    if (!ok_) return nullptr;
    const int64_t got = ctrl->sizes[step % r.nSlots];
    if (got != static_cast<int64_t>(n * sizeof(T))) {
      exec_.fail(r, "step size mismatch (send and receive counts differ)", got, static_cast<long>(n * sizeof(T)));
      ok_ = false;
      return nullptr;
    }
    return reinterpret_cast<const T*>(r.slot(step));
  }

  CHORUS_HD void postRecv() {
    FifoEnd& r = *recv_;
    Exec::storeRelease(&r.ctrl->head, ++r.step);
  }

  Exec& exec_;
  FifoEnd* recv_;
  FifoEnd* send_;
  Op op_;
  bool ok_ = true;
};

}  // namespace chorus
