// The topology settings a communicator honours at init: NCCL_TOPO_FILE (load the
// topology instead of detecting it), NCCL_TOPO_DUMP_FILE (write it, from rank
// NCCL_TOPO_DUMP_FILE_RANK, default 0) and NCCL_GRAPH_DUMP_FILE (write the rings and
// trees chosen, from rank NCCL_GRAPH_DUMP_FILE_RANK, default 0). The CPU executor does
// not route by topology, so with none of them set a CPU communicator's init neither
// detects nor searches; a GPU communicator's does (routeGpu).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/path_type.h"
#include "nccl.h"

namespace chorus::topo {

// `hosts`: how many hosts the communicator spans (the rings and trees searched span as many).
ncclResult_t applyTopologySettings(int rank, int hosts);

// Where a GPU communicator's rank sits in its host's ring, from the topology search over the
// host's topology (NCCL_TOPO_FILE, or detected).
struct GpuRoute {
  int position = -1;    // this rank's GPU in the searched ring order; -1: not in the topology
  float intraBw = 0;    // GB/s: the ring's narrowest hop inside the host (0: one GPU, or none)
  int channels = 1;     // how many channels that hop feeds (kGpuChannelGBs each)
  bool nvlink = false;  // every hop of the host's ring is NVLink
  std::string gpuName;  // the GPU's PCI bus id in the topology, for the log
  int topoGpu = -1;     // the GPU's index among the topology's GPUs (document order); -1: not in it
  // The path from this GPU to each of the topology's GPUs, by that index (LOC to itself):
  // what the transports compare with NCCL_P2P_LEVEL.
  std::vector<PathType> pathToGpu;
  // Each of the topology's GPUs by that index: its PCI location as gpuBusIdOf numbers it,
  // and its `dev` in the topology.
  std::vector<uint64_t> gpuBusIds;
  std::vector<int> gpuDevs;
  // The network ports of the NICs nearest this GPU, the one dealt to it first
  // (TopoSystem::nearestNic): where its network connections leave.
  std::vector<std::string> nearNics;
  // The path from this GPU to each of nearNics' NICs (NCCL_NET_GDR_LEVEL is compared with it).
  std::vector<PathType> nearNicPaths;
  // GB/s this GPU's network traffic gets: the dealt NIC's fastest port, or the narrowest link
  // on the way to it if that is narrower (0: no NIC in the topology).
  float nicGBs = 0;
};
// What one channel (one thread block) of NCCL's moves over NVLink on Hopper: NCCL runs 16
// channels over a DGX H100's 18 NVLinks (371 GB/s), about 23 GB/s each.
inline constexpr float kGpuChannelGBs = 24.0f;
// `cudaDev` and `busId` (cuda_executor.h's gpuBusIdOf; 0: unknown) name the rank's GPU: by
// PCI location where known, else by the topology's `dev` number.
ncclResult_t routeGpu(int cudaDev, uint64_t busId, int hosts, GpuRoute* route);

}  // namespace chorus::topo
