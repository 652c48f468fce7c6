// chorus_topo: prints the topology Chorus detects (or loads from an XML file), the rings
// and trees the search chooses, and the AllReduce bandwidth they predict, for `-n` hosts
// of that shape.
//
//   chorus_topo [-f topo.xml] [-n hosts] [-d dump.xml] [-g graphs.xml] [-r repeats]
#include <getopt.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/debug.h"
#include "src/topo/detect.h"
#include "src/topo/topo_search.h"
#include "src/topo/topo_system.h"
#include "src/topo/topo_xml.h"

using namespace chorus::topo;

namespace {

struct Options {
  std::string file;
  std::string dump;
  std::string graphDump;
  int hosts = 1;
  int repeats = 1;
};

void usage(const char* self) {
  fprintf(stderr,
          "usage: %s [-f topo.xml] [-n hosts] [-d dump.xml] [-g graphs.xml] [-r repeats]\n"
          "  -f  load NCCL's topology XML instead of detecting this machine\n"
          "  -n  hosts of this shape the rings and trees span (default 1)\n"
          "  -d  write the topology as NCCL's XML (NCCL_TOPO_DUMP_FILE's format)\n"
          "  -g  write the rings and trees as NCCL's graph XML (NCCL_GRAPH_DUMP_FILE's format)\n"
          "  -r  run load/detection and search this many times and print the mean time\n",
          self);
}

bool parse(int argc, char** argv, Options* o) {
  for (int c; (c = getopt(argc, argv, "f:n:d:g:r:h")) != -1;) {
    switch (c) {
      case 'f':
        o->file = optarg;
        break;
      case 'd':
        o->dump = optarg;
        break;
      case 'g':
        o->graphDump = optarg;
        break;
      case 'n':
        o->hosts = atoi(optarg);
        break;
      case 'r':
        o->repeats = atoi(optarg);
        break;
      default:
        return false;
    }
  }
  if (o->hosts < 1 || o->hosts > 4096 || o->repeats < 1) {
    fprintf(stderr, "chorus_topo: -n must be 1..4096 and -r at least 1\n");
    return false;
  }
  return optind == argc;
}

const char* kindName(NodeKind kind) {
  switch (kind) {
    case NodeKind::Cpu:
      return "CPU";
    case NodeKind::PciSwitch:
      return "PCI";
    case NodeKind::Gpu:
      return "GPU";
    case NodeKind::Nic:
      return "NIC";
    case NodeKind::NvSwitch:
      return "NVS";
  }
  return "?";
}

void printSystem(const TopoSystem& system) {
  printf("Topology: %zu CPU socket(s), %zu GPU(s), %zu NIC(s); link between sockets %.1f GB/s\n", system.cpus().size(),
         system.gpus().size(), system.nics().size(), system.interSocketBw());
  for (size_t i = 0; i < system.nodes().size(); ++i) {
    const TopoNode& node = system.node(static_cast<int>(i));
    int depth = 0;
    for (int at = node.parent; at >= 0; at = system.node(at).parent) ++depth;
    printf("  %*s%s %s", 2 * depth, "", kindName(node.kind), node.id.c_str());
    if (node.kind == NodeKind::Gpu) printf(" dev %d sm %d", node.gpuDev, node.sm);
    if (node.kind == NodeKind::Nic) printf(" %s %.1f GB/s", node.netNames.front().c_str(), node.netBw);
    if (node.parent >= 0) printf(" (PCIe %.1f GB/s)", node.upBw);
    for (const TopoNode::NvLink& link : node.nvlinks) {
      printf(" NVLink %.1f GB/s to %s", link.bw, system.node(link.to).id.c_str());
    }
    if (node.kind == NodeKind::Gpu) {
      const int nic = system.nearestNic(static_cast<int>(i));
      if (nic >= 0) {
        printf(" -> nearest NIC %s (%s)", system.node(nic).netNames.front().c_str(),
               pathTypeName(system.path(static_cast<int>(i), nic).type));
      }
    }
    printf("\n");
  }
}

void printPlans(const TopoSystem& system, const RingPlan& ring, const TreePlan& tree, int hosts) {
  const int ranks = static_cast<int>(system.gpus().size()) * hosts;
  printf("\nRing (%d host(s), %d rank(s)): %d channel(s), GPUs", hosts, ranks, ring.channels);
  for (int gpu : ring.order) printf(" %d", system.node(gpu).gpuDev);
  printf("; worst hop %s, %d socket crossing(s), %.1f GB/s inside a host", pathTypeName(ring.worstHop),
         ring.socketCrossings, ring.intraBw);
  if (hosts > 1) printf(", %.1f GB/s through the NICs", ring.interBw);
  printf("\nTree: chain");
  for (int gpu : tree.chain) printf(" %d", system.node(gpu).gpuDev);
  printf("; %.1f GB/s inside a host", tree.intraBw);
  if (hosts > 1) printf(", %.1f GB/s through the head's NIC", tree.interBw);
  printf("\n\nPredicted AllReduce     algbw (GB/s)   busbw (GB/s)\n");
  printf("  Ring                  %12.2f   %12.2f\n", ring.algBw, ring.busBw);
  printf("  Tree                  %12.2f   %12.2f\n", tree.algBw, tree.busBw);
}

ncclResult_t topology(const Options& o, XmlNode* xml) {
  *xml = XmlNode{};
  return o.file.empty() ? detectTopology(xml) : loadXmlFile(o.file, xml);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    usage(argv[0]);
    return 2;
  }
  XmlNode xml;
  TopoSystem system;
  RingPlan ring;
  TreePlan tree;
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < o.repeats; ++r) {
    if (topology(o, &xml) != ncclSuccess) {
      // The cause itself: with NCCL_DEBUG unset no WARN line was printed.
      const std::string cause = chorus::lastErrorText();
      fprintf(stderr, "chorus_topo: %s failed: %s\n", o.file.empty() ? "detection" : o.file.c_str(),
              cause.empty() ? "no cause was recorded" : cause.c_str());
      return 1;
    }
    if (TopoSystem::fromXml(xml, &system, &error) != ncclSuccess) {
      fprintf(stderr, "chorus_topo: %s\n", error.c_str());
      return 1;
    }
    ring = searchRing(system, o.hosts);
    tree = searchTree(system, o.hosts);
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / o.repeats;
  printSystem(system);
  printPlans(system, ring, tree, o.hosts);
  printf("\n%s and search: %.3f ms (mean of %d)\n", o.file.empty() ? "Detection" : "Loading", ms, o.repeats);
  if (!o.dump.empty() && dumpXmlFile(o.dump, xml) != ncclSuccess) return 1;
  if (!o.graphDump.empty() && dumpXmlFile(o.graphDump, graphsXml(system, ring, tree, o.hosts)) != ncclSuccess) {
    return 1;
  }
  return 0;
}
