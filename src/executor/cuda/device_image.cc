#include "src/executor/cuda/device_image.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <unordered_map>

#include "core/debug.h"

namespace chorus {
namespace {

// Places objects in a byte image: reserve everything first (the vector may move), then
// fill through host pointers and hand out the addresses they will have at `base`.
class ImageWriter {
 public:
  explicit ImageWriter(uintptr_t base) : base_(base) {}
  template <typename T>
  size_t reserve(size_t count) {
    size_t offset = (bytes_.size() + alignof(T) - 1) / alignof(T) * alignof(T);
    bytes_.resize(offset + sizeof(T) * count);
    return offset;
  }
  template <typename T>
  T* host(size_t offset) {
    return reinterpret_cast<T*>(bytes_.data() + offset);
  }
  template <typename T>
  T* device(size_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }
  std::vector<std::byte> take() { return std::move(bytes_); }
  size_t size() const { return bytes_.size(); }

 private:
  uintptr_t base_;
  std::vector<std::byte> bytes_;
};

// A copy of `end` whose memory pointers are the GPU's; false when unreachable.
bool relocateEnd(const FifoEnd& end, const FifoAddressMap& map, FifoEnd* out) {
  *out = end;
  char* host = reinterpret_cast<char*>(end.ctrl);
  char* gpu = static_cast<char*>(map(host));
  if (gpu == nullptr) return false;
  out->ctrl = reinterpret_cast<StepFifoControl*>(gpu);
  if (end.gpuBuffers) return true;  // GPU memory already: the addresses stay
  for (int p = 0; p < kNumProtocols; ++p) out->buffs[p] = end.buffs[p] ? gpu + (end.buffs[p] - host) : nullptr;
  return true;
}

}  // namespace

size_t fifoMemoryBytes(const FifoEnd& end) {
  const char* base = reinterpret_cast<const char*>(end.ctrl);
  size_t bytes = sizeof(StepFifoControl);
  if (end.gpuBuffers) return bytes;  // the buffers are GPU memory of their own
  for (int p = 0; p < kNumProtocols; ++p) {
    if (end.buffs[p] == nullptr) continue;
    const size_t top = static_cast<size_t>(end.buffs[p] - base) + end.slotStride[p] * static_cast<size_t>(end.nSlots);
    if (top > bytes) bytes = top;
  }
  return bytes;
}

ncclResult_t buildCommImage(const ncclComm& comm, uintptr_t base, const FifoAddressMap& map, CommImage* out) {
  const int n = comm.nranks;
  const int nChannels = static_cast<int>(comm.channelViews.size());
  // The ends the channel views use, each once (ring and tree may share one).
  std::vector<const FifoEnd*> channelEnds;
  std::unordered_map<const FifoEnd*, int> slotOf;
  auto addEnd = [&](const FifoEnd* e) {
    if (e != nullptr && slotOf.emplace(e, static_cast<int>(channelEnds.size())).second) channelEnds.push_back(e);
  };
  for (const ChannelView& v : comm.channelViews) {
    addEnd(v.ringRecv);
    addEnd(v.ringSend);
    addEnd(v.tree.sendUp);
    addEnd(v.tree.recvDown);
    for (int i = 0; i < v.tree.nChildren; ++i) {
      addEnd(v.tree.recvUp[i]);
      addEnd(v.tree.sendDown[i]);
    }
  }
  const int nChannelEnds = static_cast<int>(channelEnds.size());

  ImageWriter w(base);
  const size_t endsAt = w.reserve<FifoEnd>(nChannelEnds + 2 * n);  // channel ends, p2p sends, p2p receives
  const size_t viewsAt = w.reserve<ChannelView>(nChannels);
  const size_t ringAt = w.reserve<int>(static_cast<size_t>(nChannels) * n);
  const size_t sendTableAt = w.reserve<FifoEnd*>(n);
  const size_t recvTableAt = w.reserve<FifoEnd*>(n);

  FifoEnd* ends = w.host<FifoEnd>(endsAt);
  for (int i = 0; i < nChannelEnds + 2 * n; ++i) new (ends + i) FifoEnd();
  // Copies `e` into `slot`; its address on the GPU goes to *at (0 is a valid base).
  auto place = [&](const FifoEnd* e, int slot, FifoEnd** at) {
    if (!relocateEnd(*e, map, &ends[slot])) {
      WARN("CUDA executor: rank %d: the memory of its connection with rank %d (%p) is not reachable by the GPU",
           comm.rank, e->peer, static_cast<void*>(e->ctrl));
      return false;
    }
    if (at) *at = w.device<FifoEnd>(endsAt) + slot;
    return true;
  };
  for (int i = 0; i < nChannelEnds; ++i)
    if (!place(channelEnds[i], i, nullptr)) return ncclInternalError;
  auto gpuEnd = [&](const FifoEnd* e) { return e ? w.device<FifoEnd>(endsAt) + slotOf.at(e) : nullptr; };

  ChannelView* views = w.host<ChannelView>(viewsAt);
  int* ring = w.host<int>(ringAt);
  for (int c = 0; c < nChannels; ++c) {
    const ChannelView& v = comm.channelViews[c];
    ChannelView& g = views[c];
    g = ChannelView{};
    g.ringRecv = gpuEnd(v.ringRecv);
    g.ringSend = gpuEnd(v.ringSend);
    std::memcpy(ring + static_cast<size_t>(c) * n, v.ringRanks, sizeof(int) * n);
    g.ringRanks = w.device<int>(ringAt) + static_cast<size_t>(c) * n;
    g.tree.parent = v.tree.parent;
    g.tree.nChildren = v.tree.nChildren;
    g.tree.sendUp = gpuEnd(v.tree.sendUp);
    g.tree.recvDown = gpuEnd(v.tree.recvDown);
    for (int i = 0; i < v.tree.nChildren; ++i) {
      g.tree.recvUp[i] = gpuEnd(v.tree.recvUp[i]);
      g.tree.sendDown[i] = gpuEnd(v.tree.sendDown[i]);
    }
  }

  FifoEnd** sendTable = w.host<FifoEnd*>(sendTableAt);
  FifoEnd** recvTable = w.host<FifoEnd*>(recvTableAt);
  for (int p = 0; p < n; ++p) {
    sendTable[p] = recvTable[p] = nullptr;
    const FifoEnd* send = comm.view.p2pSend ? comm.view.p2pSend[p] : nullptr;
    const FifoEnd* recv = comm.view.p2pRecv ? comm.view.p2pRecv[p] : nullptr;
    if (send && !place(send, nChannelEnds + p, &sendTable[p])) return ncclInternalError;
    if (recv && !place(recv, nChannelEnds + n + p, &recvTable[p])) return ncclInternalError;
  }

  out->view = CommView{comm.rank,
                       n,
                       nChannels,
                       w.device<ChannelView>(viewsAt),
                       w.device<FifoEnd* const>(sendTableAt),
                       w.device<FifoEnd* const>(recvTableAt),
                       comm.view.ordered};
  out->bytes = w.take();
  return ncclSuccess;
}

// Reserves a launch image's parts in `w`: its KernelLanes, then all the lanes' items.
struct LaunchLayout {
  size_t lanesAt;
  size_t itemsAt;
};
LaunchLayout reserveLaunchImage(const std::vector<Lane*>& lanes, ImageWriter* w) {
  size_t nItems = 0;
  for (const Lane* lane : lanes) nItems += lane->items.size();
  const size_t lanesAt = w->reserve<KernelLane>(lanes.size());
  return LaunchLayout{lanesAt, w->reserve<WorkItem>(nItems)};
}

size_t launchImageBytes(const std::vector<Lane*>& lanes) {
  ImageWriter sizing(0);
  reserveLaunchImage(lanes, &sizing);
  return sizing.size();
}

void buildLaunchImage(const std::vector<Lane*>& lanes, uintptr_t base, LaunchImage* out) {
  ImageWriter w(base);
  const auto [lanesAt, itemsAt] = reserveLaunchImage(lanes, &w);
  size_t next = 0;
  for (size_t l = 0; l < lanes.size(); ++l) {
    const std::vector<WorkItem>& items = lanes[l]->items;
    if (!items.empty()) std::memcpy(w.host<WorkItem>(itemsAt) + next, items.data(), sizeof(WorkItem) * items.size());
    *w.host<KernelLane>(lanesAt + sizeof(KernelLane) * l) =
        KernelLane{w.device<const WorkItem>(itemsAt) + next, static_cast<int>(items.size())};
    next += items.size();
  }
  out->lanes = w.device<const KernelLane>(lanesAt);
  out->nLanes = static_cast<int>(lanes.size());
  out->bytes = w.take();
}

std::vector<std::pair<size_t, size_t>> changedRanges(const std::vector<std::byte>& before,
                                                     const std::vector<std::byte>& after, size_t gap) {
  std::vector<std::pair<size_t, size_t>> ranges;
  const size_t n = std::min(before.size(), after.size());
  for (size_t i = 0; i < n; ++i) {
    if (before[i] == after[i]) continue;
    if (!ranges.empty() && i - ranges.back().second < gap) {
      ranges.back().second = i + 1;
    } else {
      ranges.emplace_back(i, i + 1);
    }
  }
  if (after.size() > n) ranges.emplace_back(n, after.size());
  return ranges;
}

}  // namespace chorus
