// Communicator life cycle and queries.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <set>
#include <thread>

#include "chorus.h"
#include "core/debug.h"
#include "core/env.h"
#include "src/api/config.h"
#include "src/api/export.h"
#include "src/api/validate.h"
#include "src/bootstrap/bootstrap.h"
#include "src/executor/cuda/cuda_executor.h"
#include "src/executor/executor.h"
#include "src/executor/executor_choice.h"
#include "src/group/group.h"

using namespace chorus;

namespace {

// `serial`, when given: the new communicator's (ncclComm::serial), read before its handle
// is published.
// `asked`: the executor the caller named (Auto: CHORUS_EXECUTOR's, or the GPU where one
// can be used).
ncclResult_t initRank(ncclComm_t* newcomm, int nranks, std::vector<ncclUniqueId> ids, int rank, int cudaDev,
                      const ncclConfig_t* config, const char* func, uint64_t* serial = nullptr,
                      ExecutorChoice asked = ExecutorChoice::Auto) {
  CHORUS_CHECK(checkNotNull(newcomm, "comm", func));
  *newcomm = nullptr;  // what a refused call leaves, as NCCL
  if (nranks < 1) {
    WARN("%s: invalid argument: nranks %d must be at least 1", func, nranks);
    return ncclInvalidArgument;
  }
  CHORUS_CHECK(checkRank(rank, nranks, "rank", func));
  // This thread's lines name the communicator it last made (initCommunicator); from here
  // on they are about the new one, which has no name until its config is read.
  setLogContext(rank, LogName());
  CommConfig parsed;
  CHORUS_CHECK(parseConfig(config, &parsed, func));

  auto comm = std::make_unique<ncclComm>();
  comm->rank = rank;
  comm->nranks = nranks;
  comm->cudaDev = cudaDev;
  comm->config = parsed;
  CHORUS_CHECK(decideExecutor(comm.get(), asked, func));
  ncclComm* raw = comm.get();
  {
    // Counted before the handle is published: another thread may abort it from then on
    // (ncclComm::abandoned), and this thread frees it if so.
    std::lock_guard<std::mutex> lock(commLifecycleMutex());
    ++raw->initThreads;
  }
  if (serial != nullptr) *serial = raw->serial;
  *newcomm = raw;
  ncclResult_t r = enqueueInit(raw, [raw, ids = std::move(ids)] { return initCommunicator(raw, ids); });
  {
    std::lock_guard<std::mutex> lock(commLifecycleMutex());
    --raw->initThreads;
    if (raw->abandoned && (r == ncclSuccess || r == ncclInProgress)) {
      WARN("%s: communicator %p (rank %d) was aborted (ncclCommAbort) before its set-up finished", func,
           static_cast<void*>(raw), rank);
      r = ncclSystemError;
    }
    if (r == ncclSuccess || r == ncclInProgress) {
      comm.release();
      return r;
    }
    // From here on an abort on another thread finds it gone. (Nothing else closes a
    // communicator under set-up; if something did, it frees it.)
    if (!closeComm(raw)) {
      comm.release();
      *newcomm = nullptr;
      return r;
    }
  }
  waitForCallsToLeave(raw);  // another thread's query of the published handle
  *newcomm = nullptr;
  groupForget(raw);  // a set-up still queued in this thread's group goes with it
  return r;          // `comm` is freed here: the set-up failed or was aborted
}

// A destroy or abort that found the communicator closed by another thread between its
// check and its claim (that thread's destroy or abort, or its failed set-up, frees it).
ncclResult_t closedMeanwhile(const ncclComm* comm, const char* func) {
  WARN(
      "%s: invalid usage: communicator %p (rank %d) is being freed by another thread (destroyed, aborted, or its "
      "set-up failed)",
      func, static_cast<const void*>(comm), comm->rank);
  return ncclInvalidUsage;
}

// NCCL 2.30's ncclCommProperties_t (nccl_device.h, not in nccl.h): like ncclConfig_t it
// starts with its own size, magic and version, so only the fields a caller's struct has
// are written.
struct CommProperties {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int rank, nRanks, cudaDev, nvmlDev;
  bool deviceApiSupport, multimemSupport;
  int ginType;  // ncclGinType_t: NCCL_GIN_TYPE_NONE (0) here
  int nLsaTeams;
  bool hostRmaSupport;
  int railedGinType;
};
constexpr size_t kPropertiesHeader = offsetof(CommProperties, rank);

// The GPU memory a communicator holds: its executor's and its FIFOs' buffers.
uint64_t gpuMemoryOf(ncclComm_t comm) {
  const Executor* executor = comm->chosenExecutor.load(std::memory_order_acquire);
  return (executor ? executor->gpuMemoryBytes() : 0) + comm->gpuFifoBytes();
}

}  // namespace

extern "C" {

ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  CHORUS_CHECK(checkNotNull(uniqueId, "uniqueId", "ncclGetUniqueId"));
  return bootstrapGetUniqueId(uniqueId);
}

ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t* config) {
  return initRank(comm, nranks, {commId}, rank, currentCudaDevice(), config, "ncclCommInitRankConfig");
}

ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return initRank(comm, nranks, {commId}, rank, currentCudaDevice(), nullptr, "ncclCommInitRank");
}

// Chorus' extension (chorus.h): exported by name, no pnccl twin.
__attribute__((visibility("default"))) ncclResult_t chorusCommInitRankExecutor(ncclComm_t* comm, int nranks,
                                                                               ncclUniqueId commId, int rank,
                                                                               ncclConfig_t* config,
                                                                               chorusExecutor_t executor) {
  const char* func = "chorusCommInitRankExecutor";
  ExecutorChoice asked = ExecutorChoice::Auto;
  switch (executor) {
    case chorusExecutorAuto:
      break;
    case chorusExecutorCpu:
      asked = ExecutorChoice::Cpu;
      break;
    case chorusExecutorGpu:
      asked = ExecutorChoice::Cuda;
      break;
    default:
      WARN("%s: invalid argument: executor %d is not a chorusExecutor_t", func, static_cast<int>(executor));
      return ncclInvalidArgument;
  }
  return initRank(comm, nranks, {commId}, rank, currentCudaDevice(), config, func, nullptr, asked);
}

__attribute__((visibility("default"))) ncclResult_t chorusCommGetExecutor(ncclComm_t comm, chorusExecutor_t* executor) {
  const char* func = "chorusCommGetExecutor";
  const CommCall held(comm);
  CHORUS_CHECK(held.check(func));
  CHORUS_CHECK(checkNotNull(executor, "executor", func));
  const bool gpu = comm->executorChoice.load(std::memory_order_acquire) == ExecutorChoice::Cuda;
  *executor = gpu ? chorusExecutorGpu : chorusExecutorCpu;
  return ncclSuccess;
}

ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                       ncclConfig_t* config) {
  const char* func = "ncclCommInitRankScalable";
  CHORUS_CHECK(checkNotNull(newcomm, "newcomm", func));
  *newcomm = nullptr;
  CHORUS_CHECK(checkNotNull(commIds, "commIds", func));
  if (nId < 1) {
    WARN("%s: invalid argument: nId %d must be at least 1", func, nId);
    return ncclInvalidArgument;
  }
  // Every rank holds the same ids; each id's root serves a block of the ranks, as in NCCL.
  return initRank(newcomm, nranks, std::vector<ncclUniqueId>(commIds, commIds + nId), myrank, currentCudaDevice(),
                  config, func);
}

ncclResult_t pncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  const char* func = "ncclCommInitAll";
  CHORUS_CHECK(checkNotNull(comms, "comms", func));
  // As NCCL: a negative count or device is an invalid argument, a duplicate device invalid
  // usage, and no devices at all nothing to do.
  if (ndev < 0) {
    WARN("%s: invalid argument: ndev %d is negative", func, ndev);
    return ncclInvalidArgument;
  }
  if (ndev == 0) return ncclSuccess;
  if (devlist) {
    std::set<int> seen;
    for (int i = 0; i < ndev; ++i) {
      if (devlist[i] < 0) {
        WARN("%s: invalid argument: devlist[%d] = %d is negative", func, i, devlist[i]);
        return ncclInvalidArgument;
      }
      // Several ranks on one GPU only when asked for (executor_choice.h).
      if (!seen.insert(devlist[i]).second && envInt("CHORUS_ALLOW_SHARED_GPU", 0) != 1) {
        WARN("%s: invalid usage: devlist[%d] = %d is a duplicate (CHORUS_ALLOW_SHARED_GPU=1 allows duplicates)", func,
             i, devlist[i]);
        return ncclInvalidUsage;
      }
    }
  }
  ncclUniqueId id;
  CHORUS_CHECK(bootstrapGetUniqueId(&id));
  groupStart();
  ncclResult_t r = ncclSuccess;
  std::vector<uint64_t> serials(ndev, 0);
  for (int i = 0; i < ndev && r == ncclSuccess; ++i)
    r = initRank(&comms[i], ndev, {id}, i, devlist ? devlist[i] : i, nullptr, func, &serials[i]);
  ncclResult_t end = groupEnd();
  if (r == ncclSuccess) r = end;
  if (r != ncclSuccess) {
    for (int i = 0; i < ndev; ++i) {
      // False: it was freed already (a set-up aborted from another thread), maybe with a
      // new communicator at its address since, which the serial tells apart.
      if (comms[i]) freeComm(comms[i], serials[i]);
      comms[i] = nullptr;
    }
  }
  return r;
}

ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // as NCCL
  const CommCall held(comm);
  CHORUS_CHECK(held.check("ncclCommFinalize"));
  if (comm->revokeFlag.load() != 0) {
    WARN("ncclCommFinalize: invalid argument: communicator %p (rank %d) was revoked; destroy it instead",
         static_cast<void*>(comm), comm->rank);
    return ncclInvalidArgument;
  }
  if (comm->finalized.exchange(true)) {
    WARN("ncclCommFinalize: invalid argument: communicator %p (rank %d) is already finalized; destroy it",
         static_cast<void*>(comm), comm->rank);
    return ncclInvalidArgument;
  }
  if (!comm->config.blocking) {
    // Finalizing is the communicator's last job: it completes after the queued work, and
    // ncclCommGetAsyncError tells when.
    submitAsync(comm, [] { return ncclSuccess; });
    return ncclInProgress;
  }
  if (comm->worker) comm->worker->waitIdle();
  const int async = comm->asyncResult.load();
  return async == ncclInProgress ? ncclSuccess : static_cast<ncclResult_t>(async);
}

ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // as NCCL: destroying NULL is a no-op
  CommCall held(comm);
  CHORUS_CHECK(held.check("ncclCommDestroy"));
  if (groupHolds(comm)) {
    WARN(
        "ncclCommDestroy: invalid usage: communicator %p (rank %d) has calls queued in this thread's open group; "
        "end the group first (ncclGroupEnd), or abort it (ncclCommAbort drops them)",
        static_cast<void*>(comm), comm->rank);
    return ncclInvalidUsage;
  }
  {
    std::lock_guard<std::mutex> lock(commLifecycleMutex());
    if (comm->initThreads > 0) {
      WARN(
          "ncclCommDestroy: invalid usage: communicator %p (rank %d) is still being set up on another thread; abort "
          "it (ncclCommAbort) to stop the set-up",
          static_cast<void*>(comm), comm->rank);
      return ncclInvalidUsage;
    }
    if (!closeComm(comm)) return closedMeanwhile(comm, "ncclCommDestroy");
  }
  held.release();
  // Calls other threads are inside finish first (as NCCL's destroy, which waits for the
  // communicator's work); then its non-blocking work.
  waitForCallsToLeave(comm);
  if (comm->worker) comm->worker->waitIdle();
  INFO(kSubsysInit, "comm %p rank %d nRanks %d - Destroy COMPLETE", static_cast<void*>(comm), comm->rank, comm->nranks);
  delete comm;
  return ncclSuccess;
}

ncclResult_t pncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  CommCall held(comm);
  CHORUS_CHECK(held.check("ncclCommAbort"));
  groupForget(comm);  // calls queued in this thread's open group are dropped
  {
    std::lock_guard<std::mutex> lock(commLifecycleMutex());
    if (comm->initThreads > 0) {
      // Its set-up runs on another thread, which sees the flag, stops, and frees it.
      comm->abandoned = true;
      comm->abortFlag.store(1);
      INFO(kSubsysInit, "comm %p rank %d nRanks %d - Abort during set-up: freed by its set-up's thread",
           static_cast<void*>(comm), comm->rank, comm->nranks);
      return ncclSuccess;
    }
    if (!closeComm(comm)) return closedMeanwhile(comm, "ncclCommAbort");
  }
  held.release();
  // Calls on other threads see the flag, stop waiting and leave; then the memory goes.
  comm->haltWork(comm->abortFlag);
  waitForCallsToLeave(comm);
  INFO(kSubsysInit, "comm %p rank %d nRanks %d - Abort COMPLETE", static_cast<void*>(comm), comm->rank, comm->nranks);
  delete comm;  // the worker sees the flag, stops waiting, and is joined
  return ncclSuccess;
}

ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags) {
  const char* func = "ncclCommSuspend";
  const CommCall held(comm);
  CHORUS_CHECK(held.check(func));
  // As NCCL (2.31): NCCL_SUSPEND_MEM suspends; flags without it are a successful no-op.
  if ((flags & NCCL_SUSPEND_MEM) == 0) {
    INFO(kSubsysInit, "%s: comm %p rank %d: flags 0x%x lack NCCL_SUSPEND_MEM; nothing to do", func,
         static_cast<void*>(comm), comm->rank, flags);
    return ncclSuccess;
  }
  if (comm->suspended.load()) {
    WARN("%s: invalid usage: communicator %p (rank %d) is already suspended", func, static_cast<void*>(comm),
         comm->rank);
    return ncclInvalidUsage;
  }
  const uint64_t gpuBytes = gpuMemoryOf(comm);
  if (gpuBytes != 0) {
    WARN("%s: communicator %p (rank %d) holds %llu bytes of GPU memory, which the CUDA executor cannot release yet",
         func, static_cast<void*>(comm), comm->rank, static_cast<unsigned long long>(gpuBytes));
    return ncclInvalidUsage;
  }
  // Work already queued finishes first; then the FIFOs' slots go back to the system (they
  // return, zeroed, at the first use after ncclCommResume).
  if (comm->worker) comm->worker->waitIdle();
  comm->suspended.store(true);
  const size_t released = comm->releaseIdleBuffers();
  INFO(kSubsysInit, "%s: comm %p rank %d: released %zu bytes of FIFO memory", func, static_cast<void*>(comm),
       comm->rank, released);
  return ncclSuccess;
}

ncclResult_t pncclCommResume(ncclComm_t comm) {
  const CommCall held(comm);
  CHORUS_CHECK(held.check("ncclCommResume"));
  if (!comm->suspended.exchange(false)) {
    WARN("ncclCommResume: invalid usage: communicator %p (rank %d) is not suspended", static_cast<void*>(comm),
         comm->rank);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  const char* func = "ncclCommMemStats";
  const CommCall held(comm);
  CHORUS_CHECK(held.check(func));
  CHORUS_CHECK(checkNotNull(value, "value", func));
  // The CUDA executor's image of the connections and the FIFOs' GPU buffers: all of it
  // stays while suspended.
  const uint64_t gpuBytes = gpuMemoryOf(comm);
  switch (stat) {
    case ncclStatGpuMemSuspend:
      *value = 0;
      return ncclSuccess;
    case ncclStatGpuMemSuspended:
      *value = comm->suspended.load() ? 1 : 0;
      return ncclSuccess;
    case ncclStatGpuMemPersist:
    case ncclStatGpuMemTotal:
      *value = gpuBytes;
      return ncclSuccess;
  }
  WARN("%s: invalid argument: stat %d is not an ncclCommMemStat_t", func, static_cast<int>(stat));
  return ncclInvalidArgument;
}

ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  const CommCall held(comm);
  CHORUS_CHECK(held.check("ncclCommCount"));
  CHORUS_CHECK(checkReady(comm, "ncclCommCount", ReadyCheck::kQuery));
  CHORUS_CHECK(checkNotNull(count, "count", "ncclCommCount"));
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  const CommCall held(comm);
  CHORUS_CHECK(held.check("ncclCommCuDevice"));
  CHORUS_CHECK(checkReady(comm, "ncclCommCuDevice", ReadyCheck::kQuery));
  CHORUS_CHECK(checkNotNull(device, "device", "ncclCommCuDevice"));
  *device = comm->cudaDev;
  return ncclSuccess;
}

ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  const CommCall held(comm);
  CHORUS_CHECK(held.check("ncclCommUserRank"));
  CHORUS_CHECK(checkReady(comm, "ncclCommUserRank", ReadyCheck::kQuery));
  CHORUS_CHECK(checkNotNull(rank, "rank", "ncclCommUserRank"));
  *rank = comm->rank;
  return ncclSuccess;
}

// What the communicator offers the device-side API: none of it (no device communicator,
// no multicast, no GIN, no load-store team), but host RMA on windows (ncclPutSignal).
ncclResult_t pncclCommQueryProperties(ncclComm_t comm, CommProperties* props) {
  const CommCall held(comm);
  CHORUS_CHECK(held.check("ncclCommQueryProperties"));
  CHORUS_CHECK(checkReady(comm, "ncclCommQueryProperties", ReadyCheck::kQuery));
  CHORUS_CHECK(checkNotNull(props, "props", "ncclCommQueryProperties"));
  if (props->magic != NCCL_API_MAGIC || props->size <= kPropertiesHeader) {
    WARN(
        "ncclCommQueryProperties: invalid argument: props (magic 0x%x, size %zu) was not set up with "
        "NCCL_COMM_PROPERTIES_INITIALIZER",
        props->magic, props->size);
    return ncclInvalidArgument;
  }
  CommProperties answer{};
  answer.rank = comm->rank;
  answer.nRanks = comm->nranks;
  answer.cudaDev = comm->cudaDev;  // as ncclCommCuDevice answers
  answer.nvmlDev = -1;             // not looked up: nothing here uses NVML's numbering
  answer.hostRmaSupport = true;
  const size_t n = std::min(props->size, sizeof(CommProperties)) - kPropertiesHeader;
  std::memcpy(reinterpret_cast<char*>(props) + kPropertiesHeader, reinterpret_cast<char*>(&answer) + kPropertiesHeader,
              n);
  return ncclSuccess;
}

ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  const CommCall held(comm);
  CHORUS_CHECK(held.check("ncclCommGetAsyncError"));
  CHORUS_CHECK(checkNotNull(asyncError, "asyncError", "ncclCommGetAsyncError"));
  // A kernel's failure is seen here, as NCCL reports a device-side error, and sticks.
  Executor* executor = comm->chosenExecutor.load(std::memory_order_acquire);
  const ncclResult_t kernel = executor ? executor->asyncError(comm) : ncclSuccess;
  if (kernel != ncclSuccess) {
    int expected = ncclSuccess;
    comm->asyncResult.compare_exchange_strong(expected, kernel);
  }
  *asyncError = static_cast<ncclResult_t>(comm->asyncResult.load());
  return ncclSuccess;
}

}  // extern "C"

CHORUS_EXPORT_ALIAS(ncclGetUniqueId)
CHORUS_EXPORT_ALIAS(ncclCommInitRankConfig)
CHORUS_EXPORT_ALIAS(ncclCommInitRank)
CHORUS_EXPORT_ALIAS(ncclCommInitRankScalable)
CHORUS_EXPORT_ALIAS(ncclCommInitAll)
CHORUS_EXPORT_ALIAS(ncclCommFinalize)
CHORUS_EXPORT_ALIAS(ncclCommDestroy)
CHORUS_EXPORT_ALIAS(ncclCommAbort)
CHORUS_EXPORT_ALIAS(ncclCommSuspend)
CHORUS_EXPORT_ALIAS(ncclCommResume)
CHORUS_EXPORT_ALIAS(ncclCommMemStats)
CHORUS_EXPORT_ALIAS(ncclCommCount)
CHORUS_EXPORT_ALIAS(ncclCommCuDevice)
CHORUS_EXPORT_ALIAS(ncclCommUserRank)
CHORUS_EXPORT_ALIAS(ncclCommGetAsyncError)
CHORUS_EXPORT_ALIAS(ncclCommQueryProperties)
