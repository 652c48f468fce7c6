#include "src/topo/topo_init.h"

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

}  // namespace

ncclResult_t applyTopologySettings(int rank, int hosts) {
  const std::string file = envString("NCCL_TOPO_FILE");
  const std::string dump = envString("NCCL_TOPO_DUMP_FILE");
  const std::string graphDump = envString("NCCL_GRAPH_DUMP_FILE");
  if (file.empty() && dump.empty() && graphDump.empty()) return ncclSuccess;

  XmlNode xml;
  if (!file.empty()) {
    CHORUS_CHECK(loadXmlFile(file, &xml));
    INFO(kSubsysGraph, "Loaded topology from NCCL_TOPO_FILE %s", file.c_str());
  } else {
    CHORUS_CHECK(detectOnce(&xml));
  }
  if (!dump.empty() && rank == envInt("NCCL_TOPO_DUMP_FILE_RANK", 0)) {
    CHORUS_CHECK(dumpXmlFile(dump, xml));
    INFO(kSubsysGraph, "Topology written to NCCL_TOPO_DUMP_FILE %s", dump.c_str());
  }
  TopoSystem system;
  std::string error;
  if (TopoSystem::fromXml(xml, &system, &error) != ncclSuccess) {
    WARN("Topology %s: %s", file.empty() ? "detected" : file.c_str(), error.c_str());
    return ncclInvalidUsage;
  }
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
