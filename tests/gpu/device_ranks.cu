#include <chrono>
#include <thread>

#include "device_ranks.h"

namespace chorus {
namespace gpu_test {

std::string gpuUnavailableReason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
  if (count == 0) return "no CUDA device";
  return "";
}

DeviceBuffer::DeviceBuffer(size_t bytes) {
  if (cudaMalloc(&ptr_, bytes) != cudaSuccess) {
    ptr_ = nullptr;
    return;
  }
  cudaMemset(ptr_, 0, bytes);
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

namespace {

enum EndIndex { kRingSend, kRingRecv, kSendUp, kRecvDown, kRecvUp, kSendDown, kNumEnds };

}  // namespace

struct DeviceRanks::Rank {
  DeviceBuffer ends, ringRanks, channel, p2pRecv;
  DeviceBuffer items{sizeof(WorkItem)};
  DeviceBuffer lane{sizeof(KernelLane)};
  CommView view;
  cudaStream_t stream = nullptr;
  ~Rank() {
    if (stream) cudaStreamDestroy(stream);
  }
};

DeviceRanks::DeviceRanks(int nranks, const FifoLayout& layout) : n_(nranks), layout_(layout) {
  for (int i = 0; i < 3 * n_; ++i) links_.emplace_back(layout_.totalBytes());
  auto link = [&](int kind, int r) { return links_[3 * r + kind].get(); };  // 0 ring, 1 up, 2 down
  for (int r = 0; r < n_; ++r) {
    auto rank = std::make_unique<Rank>();
    FifoEnd ends[kNumEnds];
    const int prev = (r + n_ - 1) % n_, next = (r + 1) % n_;
    ends[kRingSend].attach(link(0, r), layout_);
    ends[kRingSend].peer = next;
    ends[kRingRecv].attach(link(0, prev), layout_);
    ends[kRingRecv].peer = prev;
    if (r > 0) {
      ends[kSendUp].attach(link(1, r), layout_);
      ends[kSendUp].peer = r - 1;
      ends[kRecvDown].attach(link(2, r), layout_);
      ends[kRecvDown].peer = r - 1;
    }
    if (r + 1 < n_) {
      ends[kRecvUp].attach(link(1, r + 1), layout_);
      ends[kRecvUp].peer = r + 1;
      ends[kSendDown].attach(link(2, r + 1), layout_);
      ends[kSendDown].peer = r + 1;
    }
    rank->ends = upload(ends, kNumEnds);
    FifoEnd* d = rank->ends.as<FifoEnd>();

    std::vector<int> ring(n_);
    for (int k = 0; k < n_; ++k) ring[k] = (r + k) % n_;
    rank->ringRanks = upload(ring.data(), ring.size());

    ChannelView view;
    view.ringSend = d + kRingSend;
    view.ringRecv = d + kRingRecv;
    view.ringRanks = rank->ringRanks.as<int>();
    view.tree.parent = r - 1;
    if (r > 0) {
      view.tree.sendUp = d + kSendUp;
      view.tree.recvDown = d + kRecvDown;
    }
    if (r + 1 < n_) {
      view.tree.nChildren = 1;
      view.tree.recvUp[0] = d + kRecvUp;
      view.tree.sendDown[0] = d + kSendDown;
    }
    rank->channel = upload(&view, 1);

    // Receives from the previous rank come over the ring connection (the abort tests).
    std::vector<FifoEnd*> p2p(n_, nullptr);
    p2p[prev] = d + kRingRecv;
    rank->p2pRecv = upload(p2p.data(), p2p.size());

    rank->view = CommView{r, n_, 1, rank->channel.as<ChannelView>(), nullptr, rank->p2pRecv.as<FifoEnd* const>()};
    cudaStreamCreateWithFlags(&rank->stream, cudaStreamNonBlocking);
    ranks_.push_back(std::move(rank));
    status_.push_back(std::make_unique<MappedHost<KernelStatus>>());
    abort_.push_back(std::make_unique<MappedHost<uint32_t>>());
  }
}

DeviceRanks::~DeviceRanks() { cudaDeviceSynchronize(); }

bool DeviceRanks::run(const std::vector<WorkItem>& items, RedKind kind, double waitSec, uint64_t timeoutNs) {
  std::vector<int> all(n_);
  for (int r = 0; r < n_; ++r) all[r] = r;
  bool aborted = false;
  return launchAndWait(all, items, kind, waitSec, timeoutNs, nullptr, &aborted) && !aborted;
}

bool DeviceRanks::runAlone(int r, const WorkItem& item, RedKind kind, double abortAfterSec, uint64_t timeoutNs,
                           double* seconds) {
  std::vector<WorkItem> items(n_, item);
  bool aborted = false;
  return launchAndWait({r}, items, kind, abortAfterSec, timeoutNs, seconds, &aborted);
}

bool DeviceRanks::launchAndWait(const std::vector<int>& ranks, const std::vector<WorkItem>& items, RedKind kind,
                                double abortAfterSec, uint64_t timeoutNs, double* seconds, bool* aborted) {
  for (int r : ranks) {
    Rank& rank = *ranks_[r];
    *status_[r]->host() = KernelStatus{};
    *abort_[r]->host() = 0;
    cudaMemcpy(rank.items.get(), &items[r], sizeof(WorkItem), cudaMemcpyHostToDevice);
    const KernelLane lane{rank.items.as<WorkItem>(), 1};
    cudaMemcpy(rank.lane.get(), &lane, sizeof(lane), cudaMemcpyHostToDevice);
  }
  // Every upload so far (the FIFOs' memset, the views, the items, the tests' inputs) went
  // through the legacy stream, which the ranks' non-blocking streams do not wait for, and a
  // pageable cudaMemcpy may return before its data lands: the kernels must not start first.
  if (cudaDeviceSynchronize() != cudaSuccess) return false;
  const auto start = std::chrono::steady_clock::now();
  for (int r : ranks) {
    Rank& rank = *ranks_[r];
    KernelArgs args;
    args.comm = rank.view;
    args.lanes = rank.lane.as<KernelLane>();
    args.status = status_[r]->device();
    args.abortFlag = abort_[r]->device();
    args.timeoutNs = timeoutNs;
    if (launchCollectiveKernel(items[r].dtype, kind, args, 1, kCudaThreadsPerLane, rank.stream) != ncclSuccess)
      return false;
  }
  *aborted = false;
  for (;;) {
    bool done = true;
    for (int r : ranks) done = done && cudaStreamQuery(ranks_[r]->stream) != cudaErrorNotReady;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (done) {
      if (seconds) *seconds = elapsed;
      return true;
    }
    if (!*aborted && abortAfterSec >= 0 && elapsed > abortAfterSec) {
      for (int r : ranks) *static_cast<volatile uint32_t*>(abort_[r]->host()) = 1;
      *aborted = true;
    }
    if (elapsed > (abortAfterSec >= 0 ? abortAfterSec : 0) + 30) return false;  // the abort did not work
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace gpu_test
}  // namespace chorus
