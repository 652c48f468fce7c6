#include "src/topo/topo_init.h"

#include <strings.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>

#include "core/debug.h"
#include "core/env.h"
#include "src/topo/detect.h"
#include "src/topo/topo_search.h"
#include "src/topo/topo_system.h"
#include "src/topo/topo_xml.h"

namespace chorus::topo {

namespace {

// This host's topology, detected once per process: ranks of one process share a host, and
// eight ranks detecting at once on two cores doubled init time.
ncclResult_t detectOnce(XmlNode* xml) {
  static std::mutex mutex;
  static std::optional<XmlNode> detected;
  std::lock_guard<std::mutex> lock(mutex);
  if (!detected) {
    XmlNode fresh;
    CHORUS_CHECK(detectTopology(&fresh));
    detected = std::move(fresh);
  }
  *xml = *detected;
  return ncclSuccess;
}

// The host's topology: NCCL_TOPO_FILE's, or detected.
ncclResult_t loadTopology(XmlNode* xml) {
  const std::string file = envString("NCCL_TOPO_FILE");
  if (file.empty()) return detectOnce(xml);
  CHORUS_CHECK(loadXmlFile(file, xml));
  INFO(kSubsysGraph, "Loaded topology from NCCL_TOPO_FILE %s", file.c_str());
  return ncclSuccess;
}

ncclResult_t buildSystem(const XmlNode& xml, TopoSystem* system) {
  std::string error;
  if (TopoSystem::fromXml(xml, system, &error) == ncclSuccess) return ncclSuccess;
  const std::string file = envString("NCCL_TOPO_FILE");
  WARN("Topology %s: %s", file.empty() ? "detected" : file.c_str(), error.c_str());
  return ncclInvalidUsage;
}

// gpuBusIdOf's number for a topology id (0000:1b:00.0): (domain << 16 | bus << 8 | device) + 1;
// 0 when the id is not a PCI location.
uint64_t busIdOf(const std::string& id) {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (sscanf(id.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) return 0;
  return (static_cast<uint64_t>(domain) << 16 | static_cast<uint64_t>(bus) << 8 | device) + 1;
}

// The topology's node of the GPU with PCI location `busId` (gpuBusIdOf's number), else
// with `dev` number `cudaDev`; -1 if none.
int gpuNodeOf(const TopoSystem& system, int cudaDev, uint64_t busId) {
  if (busId != 0) {
    for (int gpu : system.gpus())
      if (busIdOf(system.node(gpu).id) == busId) return gpu;
  }
  for (int gpu : system.gpus())
    if (system.node(gpu).gpuDev == cudaDev) return gpu;
  return -1;
}

}  // namespace

ncclResult_t routeGpu(int cudaDev, uint64_t busId, int hosts, GpuRoute* route) {
  *route = GpuRoute{};
  XmlNode xml;
  TopoSystem system;
  if (envString("NCCL_TOPO_FILE").empty()) {
    // A machine whose detection fails still runs, in rank order (a file the user named
    // must be right: its failure fails init, as applyTopologySettings' does).
    std::string error = "detection failed";
    if (detectOnce(&xml) != ncclSuccess || TopoSystem::fromXml(xml, &system, &error) != ncclSuccess) {
      INFO(kSubsysGraph, "topology: %s: GPU ring in rank order, one channel", error.c_str());
      return ncclSuccess;
    }
  } else {
    CHORUS_CHECK(loadTopology(&xml));
    CHORUS_CHECK(buildSystem(xml, &system));
  }
  const int gpu = gpuNodeOf(system, cudaDev, busId);
  if (gpu < 0) {
    INFO(kSubsysGraph, "CUDA device %d is not in the topology (%zu GPUs): rank order and one channel", cudaDev,
         system.gpus().size());
    return ncclSuccess;
  }
  const RingPlan ring = searchRing(system, hosts);
  for (size_t i = 0; i < ring.order.size(); ++i)
    if (ring.order[i] == gpu) route->position = static_cast<int>(i);
  route->gpuName = system.node(gpu).id;
  const int dealt = system.nearestNic(gpu);
  auto addNic = [&](int nic) {
    for (const std::string& name : system.node(nic).netNames) {
      route->nearNics.push_back(name);
      route->nearNicPaths.push_back(system.path(gpu, nic).type);
    }
  };
  if (dealt >= 0) {
    addNic(dealt);
    const float path = system.path(gpu, dealt).bw;
    route->nicGBs = path > 0 ? std::min(system.node(dealt).netBw, path) : system.node(dealt).netBw;
  }
  for (int nic : system.nearestNics(gpu))
    if (nic != dealt) addNic(nic);
  for (size_t i = 0; i < system.gpus().size(); ++i) {
    const int other = system.gpus()[i];
    if (other == gpu) route->topoGpu = static_cast<int>(i);
    route->pathToGpu.push_back(other == gpu ? PathType::LOC : system.path(gpu, other).type);
    route->gpuBusIds.push_back(busIdOf(system.node(other).id));
    route->gpuDevs.push_back(system.node(other).gpuDev);
  }
  if (ring.order.size() > 1) {
    route->intraBw = ring.intraBw;
    route->nvlink = ring.worstHop == PathType::NVL;
    route->channels = std::max(1, static_cast<int>(std::ceil(ring.intraBw / kGpuChannelGBs)));
  }
  return ncclSuccess;
}

ncclResult_t applyTopologySettings(int rank, int hosts) {
  const std::string file = envString("NCCL_TOPO_FILE");
  const std::string dump = envString("NCCL_TOPO_DUMP_FILE");
  const std::string graphDump = envString("NCCL_GRAPH_DUMP_FILE");
  if (file.empty() && dump.empty() && graphDump.empty()) return ncclSuccess;

  XmlNode xml;
  CHORUS_CHECK(loadTopology(&xml));
  if (!dump.empty() && rank == envInt("NCCL_TOPO_DUMP_FILE_RANK", 0)) {
    CHORUS_CHECK(dumpXmlFile(dump, xml));
    INFO(kSubsysGraph, "Topology written to NCCL_TOPO_DUMP_FILE %s", dump.c_str());
  }
  TopoSystem system;
  CHORUS_CHECK(buildSystem(xml, &system));
  const RingPlan ring = searchRing(system, hosts);
  const TreePlan tree = searchTree(system, hosts);
  INFO(kSubsysGraph,
       "Topology: %zu GPU(s), %zu NIC(s), %zu socket(s); ring over %d host(s): %d channel(s), worst hop %s, "
       "predicted AllReduce algbw %.1f GB/s (ring), %.1f GB/s (tree)",
       system.gpus().size(), system.nics().size(), system.cpus().size(), hosts, ring.channels,
       pathTypeName(ring.worstHop), ring.algBw, tree.algBw);
  if (!graphDump.empty() && rank == envInt("NCCL_GRAPH_DUMP_FILE_RANK", 0)) {
    CHORUS_CHECK(dumpXmlFile(graphDump, graphsXml(system, ring, tree, hosts)));
    INFO(kSubsysGraph, "Rings and trees written to NCCL_GRAPH_DUMP_FILE %s", graphDump.c_str());
  }
  return ncclSuccess;
}

}  // namespace chorus::topo
