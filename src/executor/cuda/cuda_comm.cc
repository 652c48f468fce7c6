#include "src/executor/cuda/cuda_comm.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/debug.h"
#include "device/cuda/cuda_launch.h"
#include "src/executor/cuda/cuda_scopes.h"
#include "src/executor/cuda/device_image.h"
#include "src/executor/cuda/host_registry.h"

namespace chorus {
namespace {

#define CHORUS_CUDA(call, rank)                                           \
  do {                                                                    \
    cudaError_t err_ = (call);                                            \
    if (err_ != cudaSuccess) return warnCudaFailure(#call, err_, (rank)); \
  } while (0)

template <typename T>
ncclResult_t allocMapped(T** host, T** device, int rank) {
  CHORUS_CUDA(cudaHostAlloc(reinterpret_cast<void**>(host), sizeof(T), cudaHostAllocMapped | cudaHostAllocPortable),
              rank);
  std::memset(static_cast<void*>(*host), 0, sizeof(T));
  CHORUS_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(device), *host, 0), rank);
  return ncclSuccess;
}

}  // namespace

ncclResult_t CudaComm::create(const ncclComm& comm, bool sharedGpu, CudaComm** out) {
  DeviceScope scope(comm.cudaDev);
  RelaxedCapture relaxed;
  CHORUS_CHECK(prepareCollectiveKernels());
  auto* c = new CudaComm(comm.cudaDev, comm.timeoutSec, sharedGpu);
  std::unique_ptr<CudaComm> owned(c);
  CHORUS_CUDA(cudaStreamCreateWithFlags(&c->copyStream_, cudaStreamNonBlocking), comm.rank);
  CHORUS_CUDA(cudaEventCreateWithFlags(&c->lastKernel_, cudaEventDisableTiming), comm.rank);
  CHORUS_CHECK(allocMapped(&c->statusHost_, &c->statusDevice_, comm.rank));
  CHORUS_CHECK(allocMapped(&c->abortHost_, &c->abortDevice_, comm.rank));
  INFO(kSubsysInit, "comm %p rank %d runs on the CUDA executor, GPU %d", static_cast<const void*>(&comm), comm.rank,
       comm.cudaDev);
  *out = owned.release();
  return ncclSuccess;
}

void CudaComm::waitForKernels() {
  // A kernel still waiting on a peer after the timeout is told to stop.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutSec_);
  for (Staging& s : staging_) {
    if (s.done == nullptr) continue;
    while (cudaEventQuery(s.done) == cudaErrorNotReady) {
      if (timeoutSec_ > 0 && std::chrono::steady_clock::now() > deadline) abort();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

CudaComm::~CudaComm() {
  DeviceScope scope(device_);
  RelaxedCapture relaxed;
  waitForKernels();
  for (Staging& s : staging_) {
    if (s.done) cudaEventDestroy(s.done);
    cudaFreeHost(s.host);
  }
  for (const Registered& r : registered_) {
    if (r.owned) {
      HostRegistry::instance().forget(r.base);
    } else {
      HostRegistry::instance().release(r.base);
    }
  }
  if (image_) cudaFree(image_);
  if (lastKernel_) cudaEventDestroy(lastKernel_);
  if (statusHost_) cudaFreeHost(statusHost_);
  if (abortHost_) cudaFreeHost(abortHost_);
  if (copyStream_) cudaStreamDestroy(copyStream_);
}

// Registers any FIFO memory not yet registered, then brings the device image up to
// date: whole at first, afterwards only the bytes that changed (newly connected peers),
// so the GPU's copies of the other ends keep their step counters.
ncclResult_t CudaComm::syncImage(ncclComm* comm) {
  if (!uploaded_.empty() && uploadedVersion_ == comm->viewVersion) return ncclSuccess;  // no connection changed
  ncclResult_t result = ncclSuccess;
  comm->forEachConnection([&](Connection& c) {
    if (!c.connected() || result != ncclSuccess) return;
    void* base = c.end.ctrl;
    auto same = [base](const Registered& r) { return r.base == base; };
    if (std::find_if(registered_.begin(), registered_.end(), same) != registered_.end()) return;
    std::string why;
    if (!HostRegistry::instance().acquire(base, fifoMemoryBytes(c.end), &why)) {
      WARN("CUDA executor: rank %d: registering the memory of its connection with rank %d failed: %s", comm->rank,
           c.end.peer, why.c_str());
      result = ncclUnhandledCudaError;
      return;
    }
    // P2P memory is shared with a peer of this process and lives until both ends have gone
    // (counted registrations); the rest is this rank's alone.
    registered_.push_back(Registered{base, c.resource != nullptr && !c.resource->jointlyOwned()});
    if (c.resource != nullptr) c.resource->drivenByKernel();
  });
  if (result != ncclSuccess) return result;
  FifoAddressMap map = [](void* host) { return HostRegistry::instance().devicePointer(host); };
  CommImage image;
  if (image_ == nullptr) {
    CHORUS_CHECK(buildCommImage(*comm, 0, map, &image));
    CHORUS_CUDA(cudaMalloc(&image_, image.bytes.size()), comm->rank);
    imageBytes_ = image.bytes.size();
  }
  const bool first = uploaded_.empty();
  CHORUS_CHECK(buildCommImage(*comm, reinterpret_cast<uintptr_t>(image_), map, &image));
  if (!first && image.bytes.size() != uploaded_.size()) {
    WARN("CUDA executor: rank %d: its connections' image grew from %zu to %zu bytes", comm->rank, uploaded_.size(),
         image.bytes.size());
    return ncclInternalError;
  }
  // First whole; afterwards only what changed (the GPU's step counters must stay).
  const auto ranges =
      first ? std::vector<std::pair<size_t, size_t>>{{0, image.bytes.size()}} : changedRanges(uploaded_, image.bytes);
  for (const auto& [begin, end] : ranges) {
    CHORUS_CUDA(cudaMemcpyAsync(static_cast<char*>(image_) + begin, image.bytes.data() + begin, end - begin,
                                cudaMemcpyHostToDevice, copyStream_),
                comm->rank);
  }
  if (!ranges.empty()) CHORUS_CUDA(cudaStreamSynchronize(copyStream_), comm->rank);
  uploaded_ = std::move(image.bytes);
  uploadedVersion_ = comm->viewVersion;
  view_ = image.view;
  return ncclSuccess;
}

ncclResult_t CudaComm::stagingFor(size_t bytes, size_t* index) {
  for (size_t i = 0; i < staging_.size(); ++i) {
    Staging& s = staging_[i];
    if (s.busy || s.captured || s.bytes < bytes || cudaEventQuery(s.done) != cudaSuccess) continue;
    *index = i;
    return ncclSuccess;
  }
  Staging s;
  s.bytes = std::max<size_t>(bytes, 64 * 1024);
  CHORUS_CUDA(cudaHostAlloc(&s.host, s.bytes, cudaHostAllocMapped | cudaHostAllocPortable), -1);
  CHORUS_CUDA(cudaHostGetDevicePointer(&s.device, s.host, 0), -1);
  CHORUS_CUDA(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming), -1);
  staging_.push_back(s);
  *index = staging_.size() - 1;
  return ncclSuccess;
}

ncclResult_t CudaComm::stage(ncclComm* comm, const std::vector<Lane*>& lanes, ncclDataType_t dtype, RedKind kind,
                             const std::vector<cudaStream_t>& streams) {
  DeviceScope scope(device_);
  RelaxedCapture relaxed;  // first: asyncError queries an event, which a global capture refuses
  if (const ncclResult_t failed = asyncError(*comm); failed != ncclSuccess) {
    // A kernel of this communicator failed, or the GPU's context is lost: the communicator
    // is failed for good, and its peers learn it from the connections now rather than at
    // their timeouts (a kernel that faulted could not tell them).
    int expected = ncclSuccess;
    comm->asyncResult.compare_exchange_strong(expected, failed);
    comm->breakConnections();
    return failed;
  }
  CHORUS_CHECK(syncImage(comm));
  size_t index = 0;
  CHORUS_CHECK(stagingFor(launchImageBytes(lanes), &index));
  Staging& staging = staging_[index];
  LaunchImage image;
  buildLaunchImage(lanes, reinterpret_cast<uintptr_t>(staging.device), &image);
  std::memcpy(staging.host, image.bytes.data(), image.bytes.size());
  staging.busy = true;
  staged_.push_back(Staged{index, image.lanes, image.nLanes, dtype, kind, streams});
  return ncclSuccess;
}

ncclResult_t CudaComm::flush(const ncclComm& comm, bool launchThem) {
  ncclResult_t result = ncclSuccess;
  if (launchThem) {
    DeviceScope scope(device_);
    for (const Staged& s : staged_) {
      if (result == ncclSuccess) result = launch(comm, s);
    }
  }
  for (const Staged& s : staged_) staging_[s.staging].busy = false;
  staged_.clear();
  return result;
}

// The kernel runs after the work already on every stream of the group's calls and after
// this communicator's previous kernel; the work enqueued on those streams later runs
// after it (NCCL's stream semantics). Nothing here allocates memory.
ncclResult_t CudaComm::launch(const ncclComm& comm, const Staged& s) {
  const int rank = comm.rank;
  cudaStream_t stream = s.streams.front();
  if (sharedGpu_ && !warnedLegacyStream_ && (stream == nullptr || stream == cudaStreamLegacy)) {
    warnedLegacyStream_ = true;
    WARN(
        "CUDA executor: rank %d shares its GPU with another rank and launches on the legacy default stream: the "
        "ranks' kernels then run one after the other and wait for each other until CHORUS_TIMEOUT; give each rank "
        "a stream of its own (cudaStreamNonBlocking)",
        rank);
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CHORUS_CUDA(cudaStreamIsCapturing(stream, &capture), rank);
  const bool capturing = capture == cudaStreamCaptureStatusActive;

  std::vector<cudaEvent_t> events;
  auto order = [&](cudaStream_t from, cudaStream_t to) -> ncclResult_t {
    cudaEvent_t e = nullptr;
    CHORUS_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), rank);
    events.push_back(e);
    CHORUS_CUDA(cudaEventRecord(e, from), rank);
    CHORUS_CUDA(cudaStreamWaitEvent(to, e, 0), rank);
    return ncclSuccess;
  };
  ncclResult_t result = ncclSuccess;
  // After this communicator's previous kernel, eager or in a graph: a captured launch waits
  // (at each replay) for the kernel last recorded when the replay runs (an external wait),
  // and records itself for the launches after it (an external record, below).
  if (lastKernelRecorded_ || lastKernelInGraph_) {
    const cudaError_t err = cudaStreamWaitEvent(stream, lastKernel_, capturing ? cudaEventWaitExternal : 0);
    if (err != cudaSuccess) result = warnCudaFailure("cudaStreamWaitEvent", err, rank);
  }
  for (size_t i = 1; i < s.streams.size() && result == ncclSuccess; ++i) result = order(s.streams[i], stream);
  KernelArgs args;
  args.comm = view_;
  args.lanes = s.lanes;
  args.status = statusDevice_;
  args.abortFlag = abortDevice_;
  args.timeoutNs = static_cast<uint64_t>(timeoutSec_ * 1e9);
  if (result == ncclSuccess)
    result = launchCollectiveKernel(s.dtype, s.kind, args, s.nLanes, kCudaThreadsPerLane, stream);
  if (result == ncclSuccess) {
    Staging& staging = staging_[s.staging];
    if (capturing) {
      staging.captured = true;  // every replay reads it
      const cudaError_t err = cudaEventRecordWithFlags(lastKernel_, stream, cudaEventRecordExternal);
      if (err != cudaSuccess) result = warnCudaFailure("cudaEventRecordWithFlags", err, rank);
      lastKernelInGraph_ = err == cudaSuccess;
    } else {
      // At once: the staging must not look free while this kernel may read it.
      cudaError_t err = cudaEventRecord(staging.done, stream);
      if (err == cudaSuccess) err = cudaEventRecord(lastKernel_, stream);
      if (err != cudaSuccess) result = warnCudaFailure("cudaEventRecord", err, rank);
      lastKernelRecorded_ = err == cudaSuccess;
      lastKernelInGraph_ = false;
    }
  }
  for (size_t i = 1; i < s.streams.size() && result == ncclSuccess; ++i) result = order(stream, s.streams[i]);
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  return result;
}

ncclResult_t CudaComm::asyncError(const ncclComm& comm) {
  const KernelStatus* s = statusHost_;
  const int code = *reinterpret_cast<const volatile int*>(&s->code);
  if (code == 0) return stickyError(comm);
  if (!reported_.exchange(true)) {
    std::atomic_thread_fence(std::memory_order_acquire);
    WARN("CUDA executor: rank %d: a kernel failed in block %d (peer %d): %.*s (got %ld, expected %ld)", comm.rank,
         s->block, s->peer, static_cast<int>(sizeof(s->what)), s->what, s->got, s->expected);
  }
  return static_cast<ncclResult_t>(code);
}

// A kernel that faulted (an illegal address, a trap) records nothing: the GPU's context is
// lost, and every later CUDA call on it fails with that error. The last kernel's event says
// so, where no status would.
// Not known while the event was last recorded in a graph (its replays record it), nor
// while a capture refuses the query.
ncclResult_t CudaComm::stickyError(const ncclComm& comm) {
  if (!lastKernelRecorded_.load(std::memory_order_acquire) || lastKernelInGraph_.load()) return ncclSuccess;
  RelaxedCapture relaxed;  // this thread may be capturing (a watchdog polling ncclCommGetAsyncError)
  const cudaError_t err = cudaEventQuery(lastKernel_);
  if (err == cudaSuccess || err == cudaErrorNotReady || err == cudaErrorCapturedEvent ||
      err == cudaErrorStreamCaptureUnsupported || err == cudaErrorStreamCaptureInvalidated ||
      err == cudaErrorStreamCaptureImplicit)
    return ncclSuccess;
  if (!reported_.exchange(true)) {
    WARN(
        "CUDA executor: rank %d: the GPU reported %s (%s) after this communicator's kernels; its CUDA context is "
        "unusable: abort the communicator",
        comm.rank, cudaGetErrorName(err), cudaGetErrorString(err));
  }
  return ncclUnhandledCudaError;
}

}  // namespace chorus
