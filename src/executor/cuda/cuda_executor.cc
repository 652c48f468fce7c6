// The CUDA executor: a group's calls on a GPU communicator are split into kernel runs,
// planned as lanes, staged as kernels on the GPU communicator's resources (created at the
// first call) and launched when the group starts. Plain C++: the CUDA runtime calls are
// the backend's (cuda_backend.h).
#include "src/executor/cuda/cuda_executor.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "core/debug.h"
#include "core/env.h"
#include "src/comm/comm.h"
#include "src/enqueue/plan.h"
#include "src/executor/cuda/cuda_backend.h"
#include "src/executor/cuda/kernel_runs.h"

namespace chorus {
namespace {

std::atomic<const GpuLaunchHooks*> gHooks{nullptr};

class CudaExecutor final : public Executor {
 public:
  ~CudaExecutor() override {
    published_.store(nullptr);
    gpu_.reset();  // waits for the kernels
  }

  ncclResult_t stage(ncclComm* comm, const std::vector<CollOp>& ops, GroupLaunch& group) override {
    group.addLaunch(this, comm);  // first: what is staged is dropped at start if a later step fails
    std::vector<cudaStream_t> streams;
    for (const CollOp& op : ops)
      if (std::find(streams.begin(), streams.end(), op.stream) == streams.end()) streams.push_back(op.stream);
    std::vector<KernelRun> runs;
    CHORUS_CHECK(splitIntoKernelRuns(comm, ops, &runs));
    std::vector<Lane*> lanes;
    std::vector<std::vector<Lane*>> kernels;
    for (const KernelRun& run : runs) {
      lanes.clear();
      CHORUS_CHECK(buildLanes(comm, run.ops, &lanes));
      if (lanes.empty()) continue;
      splitLanesIntoKernels(comm->rank, comm->nranks, comm->kernelLanes, lanes, &kernels);
      if (kernels.size() > 1) reportSplit(*comm, lanes.size(), kernels);
      for (const std::vector<Lane*>& kernel : kernels)
        CHORUS_CHECK(enqueue(comm, kernel, run.dtype, run.kind, streams));
    }
    return ncclSuccess;
  }

  ncclResult_t launch(ncclComm* comm, bool go) override {
    if (gHooks.load() != nullptr || !gpu_) return ncclSuccess;
    return gpu_->flush(*comm, go);
  }

  ncclResult_t runError() const override { return ncclSuccess; }  // nothing runs on the caller
  uint64_t gpuMemoryBytes() const override {
    const GpuComm* gpu = published_.load(std::memory_order_acquire);
    return gpu ? gpu->deviceBytes() : 0;
  }
  bool runsOnCallingThread() const override { return false; }  // the kernels run on the stream

  ncclResult_t asyncError(ncclComm* comm) override {
    GpuComm* gpu = published_.load(std::memory_order_acquire);
    return gpu ? gpu->asyncError(*comm) : ncclSuccess;
  }

  void abort() override {
    // From any thread: a watchdog aborts while the owner may be inside a call.
    if (GpuComm* gpu = published_.load(std::memory_order_seq_cst)) gpu->abort();
  }

 private:
  ncclResult_t enqueue(ncclComm* comm, const std::vector<Lane*>& lanes, ncclDataType_t dtype, RedKind kind,
                       const std::vector<cudaStream_t>& streams) {
    if (const GpuLaunchHooks* hooks = gHooks.load()) return hooks->enqueue(comm, lanes, dtype, kind, streams);
    if (!gpu_) {
      CHORUS_CHECK(createGpuComm(*comm, sharedGpuPeer(*comm) >= 0, &gpu_));
      // An abort or revoke from another thread (haltWork) that looked before this was
      // published found nothing to stop: it stops here instead. Both sides are sequentially
      // consistent (flag then executor there, executor then flag here), so one of them sees
      // the other's store.
      published_.store(gpu_.get(), std::memory_order_seq_cst);
      if (comm->abortFlag.load(std::memory_order_seq_cst) != 0 || comm->revokeFlag.load(std::memory_order_seq_cst) != 0)
        gpu_->abort();
    }
    return gpu_->stage(comm, lanes, dtype, kind, streams);
  }

  // Once per communicator: a group's lanes did not fit one kernel. A round of two lanes
  // that alone exceeds the bound (ranks crowding one GPU) may wait for an SM until the
  // timeout, which deserves a WARN.
  void reportSplit(const ncclComm& comm, size_t nLanes, const std::vector<std::vector<Lane*>>& kernels) {
    const size_t bound = static_cast<size_t>(comm.kernelLanes);
    const bool over = std::any_of(kernels.begin(), kernels.end(), [bound](const auto& k) { return k.size() > bound; });
    if (over && !warnedOverBound_) {
      warnedOverBound_ = true;
      WARN(
          "CUDA executor: rank %d: a send and a receive of one round need 2 thread blocks side by side, but its GPU "
          "runs %d of this communicator's at once (fewer SMs than ranks sharing the GPU need); they may wait for "
          "each other until CHORUS_TIMEOUT",
          comm.rank, comm.kernelLanes);
    } else if (!reportedSplit_) {
      reportedSplit_ = true;
      INFO(kSubsysColl,
           "CUDA executor: rank %d: %zu lanes exceed the %d thread blocks its GPU runs at once for this "
           "communicator: %zu kernels, sends and receives by rounds",
           comm.rank, nLanes, comm.kernelLanes, kernels.size());
    }
  }

  std::unique_ptr<GpuComm> gpu_;
  bool reportedSplit_ = false;
  bool warnedOverBound_ = false;
  // gpu_, published for asyncError and abort, which other threads may call while the
  // owner creates it (PyTorch's watchdog does).
  std::atomic<GpuComm*> published_{nullptr};
};

}  // namespace

void setGpuLaunchHooksForTesting(const GpuLaunchHooks* hooks) { gHooks.store(hooks); }

const GpuFifoMemory* gpuFifoMemory() {
  const GpuLaunchHooks* hooks = gHooks.load();
  return hooks ? hooks->fifoMemory : backendFifoMemory();
}

int gpuResidentLanes(int device) {
  const GpuLaunchHooks* hooks = gHooks.load();
  if (hooks) return hooks->residentLanes ? hooks->residentLanes(device) : 0;
  return backendResidentLanes(device);
}

bool gpuMemAlloc(void** ptr, size_t bytes, int* device, ncclResult_t* result) {
  const GpuFifoMemory* memory = gpuFifoMemory();
  if (memory == nullptr || !gpuExecutorAvailable(nullptr)) return false;
  *device = currentCudaDevice();
  std::string why;
  *ptr = memory->allocate(*device, bytes, true, &why);
  *result = *ptr != nullptr ? ncclSuccess : ncclUnhandledCudaError;
  if (*ptr == nullptr) WARN("ncclMemAlloc: %zu bytes on CUDA device %d: %s", bytes, *device, why.c_str());
  return true;
}

void gpuMemFree(void* ptr, int device) { gpuFifoMemory()->release(device, ptr); }

int gpuComputeCapability(int device) {
  const GpuLaunchHooks* hooks = gHooks.load();
  if (hooks) return hooks->computeCapability ? hooks->computeCapability(device) : 0;
  return backendComputeCapability(device);
}

bool gpuExecutorAvailable(std::string* why) {
  const GpuLaunchHooks* hooks = gHooks.load();
  return hooks ? hooks->available(why) : backendAvailable(why);
}

std::unique_ptr<Executor> makeCudaExecutor() { return std::make_unique<CudaExecutor>(); }

namespace {

// Two ranks' GPUs are one: by PCI location where both know it (device numbers differ per
// process with CUDA_VISIBLE_DEVICES: every rank may be "device 0" on a GPU of its own).
bool sameGpu(const PeerInfo& a, const PeerInfo& b) {
  if (a.hostHash != b.hostHash || !a.gpuComm || !b.gpuComm) return false;
  return a.gpuBusId != 0 && b.gpuBusId != 0 ? a.gpuBusId == b.gpuBusId : a.cudaDev == b.cudaDev;
}

}  // namespace

int sharedGpuPeer(const ncclComm& comm) {
  if (comm.rank < 0 || comm.rank >= static_cast<int>(comm.peers.size())) return -1;
  const PeerInfo& self = comm.peers[comm.rank];
  for (const PeerInfo& p : comm.peers)
    if (p.rank != comm.rank && sameGpu(p, self)) return p.rank;
  return -1;
}

int kernelLaneBudget(const std::vector<PeerInfo>& peers) {
  int budget = 0;
  for (const PeerInfo& p : peers) {
    if (!p.gpuComm || p.gpuLanes <= 0) continue;
    const auto sharing = std::count_if(peers.begin(), peers.end(), [&p](const PeerInfo& q) { return sameGpu(p, q); });
    const int share = std::max(1, p.gpuLanes / static_cast<int>(std::max<std::ptrdiff_t>(1, sharing)));
    budget = budget == 0 ? share : std::min(budget, share);
  }
  return budget;
}

namespace {

// What running several ranks on one GPU risks, said once per communicator by the lowest of
// this process's ranks on the GPU. In one process: their kernels must run side by side,
// but CUDA maps streams onto CUDA_DEVICE_MAX_CONNECTIONS hardware queues (8 unless set),
// and a rank's kernel queued behind another rank's in one queue waits for it forever.
// Across processes without MPS: their kernels take turns in time slices, so each wait for
// the other lasts a slice.
void warnSharedGpuHazards(const ncclComm& comm) {
  const PeerInfo& self = comm.peers[comm.rank];
  int inProcess = 0, elsewhere = 0, lowest = comm.rank;
  for (const PeerInfo& p : comm.peers) {
    if (!sameGpu(p, self)) continue;
    if (p.processId == self.processId) {
      ++inProcess;
      lowest = std::min(lowest, p.rank);
    } else {
      ++elsewhere;
    }
  }
  if (lowest != comm.rank) return;
  const char* connections = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (inProcess > 1 && (connections == nullptr || atoi(connections) < 32)) {
    WARN(
        "CUDA executor: %d ranks of this process share CUDA device %d; CUDA queues their streams on "
        "CUDA_DEVICE_MAX_CONNECTIONS=%s hardware queues, and a rank's kernel queued behind another rank's waits "
        "for it until CHORUS_TIMEOUT: set CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA starts, and keep the "
        "process's streams fewer than that",
        inProcess, comm.cudaDev, connections != nullptr ? connections : "8 (unset)");
  }
  if (elsewhere > 0) {
    WARN(
        "CUDA executor: CUDA device %d is shared with %d rank(s) of other processes; without MPS "
        "(nvidia-cuda-mps-control) their kernels run in turns, so every wait for one another lasts a time slice: "
        "calls are slow, and long ones may reach CHORUS_TIMEOUT",
        comm.cudaDev, elsewhere);
  }
}

}  // namespace

ncclResult_t checkGpusNotShared(const ncclComm& comm) {
  if (envInt("CHORUS_ALLOW_SHARED_GPU", 0) == 1) {
    if (comm.rank >= 0 && comm.rank < static_cast<int>(comm.peers.size()) && comm.peers[comm.rank].gpuComm)
      warnSharedGpuHazards(comm);
    return ncclSuccess;
  }
  // Every rank looks at every pair, so all of them refuse alike and none waits for the others.
  for (size_t a = 0; a < comm.peers.size(); ++a) {
    for (size_t b = a + 1; b < comm.peers.size(); ++b) {
      if (!sameGpu(comm.peers[a], comm.peers[b])) continue;
      WARN(
          "invalid usage: rank %d and rank %d both use CUDA device %d of host %s (NCCL refuses this: \"Duplicate "
          "GPU detected\"); set CHORUS_ALLOW_SHARED_GPU=1 to run several ranks on one GPU",
          comm.peers[a].rank, comm.peers[b].rank, comm.peers[a].cudaDev, comm.peers[a].hostname);
      return ncclInvalidUsage;
    }
  }
  return ncclSuccess;
}

}  // namespace chorus
