// Memory windows and the one-sided calls on them: ncclCommWindowRegister, Deregister,
// ncclWinGetUserPtr, ncclPutSignal, ncclSignal, ncclWaitSignal. A window is this rank's
// record of a buffer that every rank registers collectively; collectives on the buffer run
// as on any other memory, and one-sided calls reach the other ranks' copies through the
// communicator's RmaService (src/rma/rma_service.h), on host memory.
#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "core/cuda_driver_api.h"
#include "core/debug.h"
#include "device/common/datatypes.h"
#include "src/api/export.h"
#include "src/api/validate.h"
#include "src/comm/comm.h"
#include "src/group/group.h"
#include "src/rma/rma_service.h"

using namespace chorus;

namespace {

using WindowList = std::vector<std::unique_ptr<ncclWindow_vidmem>>;

// `win`'s entry in `comm`'s list (regMutex held); a window of another communicator, or
// one already deregistered, is refused with a WARN.
ncclResult_t findWindow(ncclComm* comm, ncclWindow_t win, const char* func, WindowList::iterator* out) {
  *out = std::find_if(comm->windows.begin(), comm->windows.end(), [win](const auto& w) { return w.get() == win; });
  if (*out != comm->windows.end()) return ncclSuccess;
  WARN("%s: invalid argument: window %p is not a window of communicator %p", func, static_cast<void*>(win),
       static_cast<void*>(comm));
  return ncclInvalidArgument;
}

// The collective part of a registration, at once or at the group's end: on failure the
// window is dropped and the caller's handle cleared.
ncclResult_t shareOrDrop(ncclComm* comm, ncclWindow_vidmem* window, ncclWindow_t* win) {
  const ncclResult_t r = shareWindow(comm, window);
  if (r == ncclSuccess) return r;
  std::lock_guard<std::mutex> lock(comm->regMutex);
  std::erase_if(comm->windows, [window](const auto& w) { return w.get() == window; });
  *win = nullptr;
  return r;
}

// The checks every one-sided call makes of its communicator and signal.
ncclResult_t checkRmaCall(const CommCall& held, ncclComm* comm, int peer, int sigIdx, int ctx, unsigned int flags,
                          const char* func) {
  CHORUS_CHECK(held.check(func));
  CHORUS_CHECK(checkReady(comm, func));
  CHORUS_CHECK(checkRank(peer, comm->nranks, "peer", func));
  if (sigIdx != 0 || ctx != 0) {
    WARN(
        "%s: invalid argument: sigIdx %d ctx %d: Chorus has one signal and one context (0 and 0; "
        "numRmaSig and numRmaCtx are not honoured)",
        func, sigIdx, ctx);
    return ncclInvalidArgument;
  }
  if (flags != 0) {
    WARN("%s: invalid argument: flags 0x%x: no flags are defined", func, flags);
    return ncclInvalidArgument;
  }
  if (comm->rma == nullptr) {
    WARN(
        "%s: invalid argument: communicator %p has no registered window: one-sided calls need one "
        "(ncclCommWindowRegister)",
        func, static_cast<void*>(comm));
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

// The put's target: a window registered by every rank, in host memory on `peer`, with
// room for `bytes` at `offset` there. On success `*seq` names it to the peer.
ncclResult_t checkPutTarget(ncclComm* comm, ncclWindow_t peerWin, int peer, size_t offset, size_t bytes, uint64_t* seq,
                            const char* func) {
  CHORUS_CHECK(checkNotNull(peerWin, "peerWin", func));
  std::lock_guard<std::mutex> lock(comm->regMutex);
  WindowList::iterator it;
  CHORUS_CHECK(findWindow(comm, peerWin, func, &it));
  const ncclWindow_vidmem& w = **it;
  if (!w.shared.load(std::memory_order_acquire)) {
    WARN("%s: invalid usage: window %p is not registered by every rank yet (its group has not ended)", func,
         static_cast<void*>(peerWin));
    return ncclInvalidUsage;
  }
  const WindowPeer& target = w.peers[peer];
  if (!target.hostMemory) {
    WARN(
        "%s: invalid usage: peer rank %d's window %p is GPU memory; one-sided calls on GPU memory are not "
        "implemented",
        func, peer, static_cast<void*>(peerWin));
    return ncclInvalidUsage;
  }
  if (offset > target.size || bytes > target.size - offset) {
    WARN("%s: invalid argument: %zu bytes at peerWinOffset %zu do not fit in peer rank %d's window of %llu bytes", func,
         bytes, offset, peer, static_cast<unsigned long long>(target.size));
    return ncclInvalidArgument;
  }
  *seq = w.seq;
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags) {
  const char* func = "ncclCommWindowRegister";
  const CommCall held(comm);
  CHORUS_CHECK(checkNotNull(win, "win", func));
  *win = nullptr;
  CHORUS_CHECK(held.check(func));
  CHORUS_CHECK(checkReady(comm, func, ReadyCheck::kQuery));
  CHORUS_CHECK(checkNotNull(buff, "buff", func));
  if (size == 0) {
    WARN("%s: invalid argument: size is 0", func);
    return ncclInvalidArgument;
  }
  if ((winFlags & ~NCCL_WIN_COLL_SYMMETRIC) != 0) {
    WARN("%s: invalid argument: winFlags 0x%x has bits other than NCCL_WIN_COLL_SYMMETRIC (0x%x)", func, winFlags,
         NCCL_WIN_COLL_SYMMETRIC);
    return ncclInvalidArgument;
  }
  auto window = std::make_unique<ncclWindow_vidmem>();
  window->comm = comm;
  window->base = buff;
  window->size = size;
  window->flags = winFlags;
  window->hostMemory = !classifyPointer(buff).device;
  ncclWindow_vidmem* w = window.get();
  {
    std::lock_guard<std::mutex> lock(comm->regMutex);
    w->seq = comm->windowsRegistered++;
    comm->windows.push_back(std::move(window));
  }
  *win = w;
  INFO(kSubsysReg, "%s: comm %p rank %d window %p: buff %p size %zu flags 0x%x", func, static_cast<void*>(comm),
       comm->rank, static_cast<void*>(w), buff, size, winFlags);
  // Every rank takes part: inside a group at its end, with the group's other registrations.
  return enqueueInit(
      comm, [comm, w, win] { return shareOrDrop(comm, w, win); }, InitKind::kOfParent);
}

ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  const char* func = "ncclCommWindowDeregister";
  const CommCall held(comm);
  CHORUS_CHECK(held.check(func));
  if (win == nullptr) return ncclSuccess;  // as NCCL: what a registration without a window returned
  std::lock_guard<std::mutex> lock(comm->regMutex);
  WindowList::iterator it;
  CHORUS_CHECK(findWindow(comm, win, func, &it));
  comm->windows.erase(it);
  return ncclSuccess;
}

ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  const char* func = "ncclWinGetUserPtr";
  CHORUS_CHECK(checkNotNull(outUserPtr, "outUserPtr", func));
  *outUserPtr = nullptr;
  const CommCall held(comm);
  CHORUS_CHECK(held.check(func));
  if (win == nullptr) return ncclSuccess;  // NULL window, NULL pointer (NCCL 2.31)
  std::lock_guard<std::mutex> lock(comm->regMutex);
  WindowList::iterator it;
  CHORUS_CHECK(findWindow(comm, win, func, &it));
  *outUserPtr = (*it)->base;
  return ncclSuccess;
}

ncclResult_t pncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                            ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags,
                            ncclComm_t comm, cudaStream_t) {
  const char* func = "ncclPutSignal";
  const CommCall held(comm);
  CHORUS_CHECK(checkRmaCall(held, comm, peer, sigIdx, ctx, flags, func));
  CHORUS_CHECK(checkDatatype(datatype, func));
  CHORUS_CHECK(checkCount(count, datatype, 1, func));
  const size_t bytes = count * typeSize(datatype);
  if (bytes > 0) {
    CHORUS_CHECK(checkNotNull(localbuff, "localbuff", func));
    if (classifyPointer(localbuff).device) {
      WARN("%s: invalid usage: localbuff %p is GPU memory; one-sided calls on GPU memory are not implemented", func,
           localbuff);
      return ncclInvalidUsage;
    }
  }
  uint64_t seq = 0;
  CHORUS_CHECK(checkPutTarget(comm, peerWin, peer, peerWinOffset, bytes, &seq, func));
  RmaService* rma = comm->rma.get();
  return enqueueRma(comm, RmaPhase::kBeforeCollectives, [=] {
    return rma->put(peer, RmaData{seq, peerWinOffset, localbuff, bytes}, /*signal=*/true);
  });
}

ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t) {
  const char* func = "ncclSignal";
  const CommCall held(comm);
  CHORUS_CHECK(checkRmaCall(held, comm, peer, sigIdx, ctx, flags, func));
  RmaService* rma = comm->rma.get();
  return enqueueRma(comm, RmaPhase::kBeforeCollectives, [=] { return rma->put(peer, std::nullopt, true); });
}

ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm, cudaStream_t) {
  const char* func = "ncclWaitSignal";
  const CommCall held(comm);
  CHORUS_CHECK(held.check(func));
  if (nDesc < 0 || (nDesc > 0 && signalDescs == nullptr)) {
    WARN("%s: invalid argument: nDesc %d with signalDescs %p", func, nDesc, static_cast<void*>(signalDescs));
    return ncclInvalidArgument;
  }
  std::vector<ncclWaitSignalDesc_t> descs(signalDescs, signalDescs + nDesc);
  for (const ncclWaitSignalDesc_t& d : descs) {
    CHORUS_CHECK(checkRmaCall(held, comm, d.peer, d.sigIdx, d.ctx, 0, func));
    if (d.opCnt < 0) {
      WARN("%s: invalid argument: opCnt %d for peer rank %d is negative", func, d.opCnt, d.peer);
      return ncclInvalidArgument;
    }
  }
  if (descs.empty()) return ncclSuccess;
  RmaService* rma = comm->rma.get();
  return enqueueRma(comm, RmaPhase::kAfterCollectives,
                    [rma, descs = std::move(descs)] { return rma->waitSignals(descs); });
}

}  // extern "C"

CHORUS_EXPORT_ALIAS(ncclCommWindowRegister)
CHORUS_EXPORT_ALIAS(ncclCommWindowDeregister)
CHORUS_EXPORT_ALIAS(ncclWinGetUserPtr)
CHORUS_EXPORT_ALIAS(ncclPutSignal)
CHORUS_EXPORT_ALIAS(ncclSignal)
CHORUS_EXPORT_ALIAS(ncclWaitSignal)
