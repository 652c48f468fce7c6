// Memory windows: ncclCommWindowRegister, ncclCommWindowDeregister, ncclWinGetUserPtr.
// A window is this rank's record of a buffer it registered on a communicator; collectives
// on the buffer run as on any other memory. The one-sided calls on windows (ncclPutSignal,
// ncclSignal, ncclWaitSignal) are not implemented yet (src/api/unsupported.cc).
#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "core/debug.h"
#include "src/api/export.h"
#include "src/api/validate.h"
#include "src/comm/comm.h"
#include "src/group/group.h"

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

}  // namespace

extern "C" {

ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags) {
  const char* func = "ncclCommWindowRegister";
  CHORUS_CHECK(checkNotNull(win, "win", func));
  *win = nullptr;
  CHORUS_CHECK(checkComm(comm, func));
  CHORUS_CHECK(checkReady(comm, func));
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
  auto window = std::make_unique<ncclWindow_vidmem>(ncclWindow_vidmem{comm, buff, size, winFlags});
  std::lock_guard<std::mutex> lock(comm->regMutex);
  *win = window.get();
  comm->windows.push_back(std::move(window));
  INFO(kSubsysReg, "%s: comm %p rank %d window %p: buff %p size %zu flags 0x%x", func, static_cast<void*>(comm),
       comm->rank, static_cast<void*>(*win), buff, size, winFlags);
  return ncclSuccess;
}

ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  const char* func = "ncclCommWindowDeregister";
  CHORUS_CHECK(checkComm(comm, func));
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
  CHORUS_CHECK(checkComm(comm, func));
  if (win == nullptr) return ncclSuccess;  // NULL window, NULL pointer (NCCL 2.31)
  std::lock_guard<std::mutex> lock(comm->regMutex);
  WindowList::iterator it;
  CHORUS_CHECK(findWindow(comm, win, func, &it));
  *outUserPtr = (*it)->base;
  return ncclSuccess;
}

}  // extern "C"

CHORUS_EXPORT_ALIAS(ncclCommWindowRegister)
CHORUS_EXPORT_ALIAS(ncclCommWindowDeregister)
CHORUS_EXPORT_ALIAS(ncclWinGetUserPtr)
