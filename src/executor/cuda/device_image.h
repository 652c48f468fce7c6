// What a GPU kernel reads, laid out as bytes for a given address: a communicator's
// connections (CommImage) and one launch's lanes of work items (LaunchImage). The host
// builds the bytes, the CUDA executor copies them to where `base` points (device memory
// or pinned host memory) and passes the image's view to the kernel. Plain host code, so
// the relocation is checked on machines without a GPU (tests/unit/device_image_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "device/common/work.h"
#include "device/cuda/kernel_args.h"
#include "src/comm/comm.h"

namespace chorus {

// The address at which the GPU reaches FIFO memory given by its host address (host memory
// registered for the GPU, or the host address itself where they coincide); nullptr when
// the memory is not reachable.
using FifoAddressMap = std::function<void*(void* host)>;

// A communicator's FifoEnds, channel views, ring orders and send/receive tables. Every
// connected ring and tree end has a slot, and every peer a send and a receive slot
// whether connected or not, so that connecting a peer later changes only its slots and
// table entries (changedRanges), never where other ends live: the GPU's copies carry
// their step counters from launch to launch and must stay where they are.
struct CommImage {
  std::vector<std::byte> bytes;  // to be placed at `base`
  CommView view;                 // its pointers point into [base, base + bytes.size())
};

// Builds `comm`'s image for `base`. ncclInternalError with a WARN naming the peer when a
// connection's memory is not reachable through `map`.
ncclResult_t buildCommImage(const ncclComm& comm, uintptr_t base, const FifoAddressMap& map, CommImage* out);

// One launch: a KernelLane per lane, then their work items.
struct LaunchImage {
  std::vector<std::byte> bytes;       // to be placed at `base`
  const KernelLane* lanes = nullptr;  // at base
  int nLanes = 0;
};

// The bytes `lanes` need (for choosing where to put them), and their image for `base`.
size_t launchImageBytes(const std::vector<Lane*>& lanes);
void buildLaunchImage(const std::vector<Lane*>& lanes, uintptr_t base, LaunchImage* out);

// [offset, end) ranges where `after` differs from `before` (equal sizes), merged when
// closer than `gap` bytes: what to copy after connections changed.
std::vector<std::pair<size_t, size_t>> changedRanges(const std::vector<std::byte>& before,
                                                     const std::vector<std::byte>& after, size_t gap = 1);

// The bytes a FifoEnd's connection memory spans from its control block (what a GPU
// communicator registers with the GPU): the control block alone where the buffers are GPU
// memory (FifoEnd::gpuBuffers).
size_t fifoMemoryBytes(const FifoEnd& end);

}  // namespace chorus
