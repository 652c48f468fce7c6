// TopoSystem: one host's topology as a graph built from NCCL's topology XML (detected or
// loaded): CPU sockets, the PCI tree under each, GPUs, NICs and their network ports,
// NVLink (direct or through NVSwitch). It answers what the search needs: the kind and
// bandwidth of the best path between two devices, and each GPU's nearest NIC.
#pragma once

#include <string>
#include <vector>

#include "core/path_type.h"
#include "nccl.h"
#include "src/topo/topo_xml.h"

namespace chorus::topo {

enum class NodeKind { Cpu, PciSwitch, Gpu, Nic, NvSwitch };

struct TopoNode {
  NodeKind kind = NodeKind::Cpu;
  std::string id;                     // PCI bus id, the NIC's net name, "cpu<numaid>"
  int parent = -1;                    // in the PCI tree: the switch or CPU above (-1 for a CPU)
  float upBw = 0;                     // GB/s of the PCI link to the parent
  int cpu = -1;                       // the CPU (socket) node above
  int gpuDev = -1;                    // Gpu: dev
  int sm = 0;                         // Gpu: compute capability x 10
  float netBw = 0;                    // Nic: GB/s of its fastest port
  std::vector<std::string> netNames;  // Nic: its ports' names
  struct NvLink {
    int to;    // a Gpu or the NvSwitch node
    float bw;  // GB/s, all the links to it together
  };
  std::vector<NvLink> nvlinks;
};

struct TopoPath {
  PathType type = PathType::SYS;
  float bw = 0;  // GB/s: the narrowest link on the way
};

class TopoSystem {
 public:
  // What fromXml builds (public so that the builder in topo_system.cc can fill it).
  struct Parts {
    std::vector<TopoNode> nodes;
    std::vector<int> gpus, nics, cpus;
    float interSocketBw = 0;
  };

  // Builds the graph from a <system> tree; an element the model cannot place gives
  // ncclInvalidUsage and `*error` names it (line, element, attribute).
  static ncclResult_t fromXml(const XmlNode& system, TopoSystem* out, std::string* error);

  const std::vector<TopoNode>& nodes() const { return parts_.nodes; }
  const TopoNode& node(int index) const { return parts_.nodes[index]; }
  const std::vector<int>& gpus() const { return parts_.gpus; }  // in document order
  const std::vector<int>& nics() const { return parts_.nics; }
  const std::vector<int>& cpus() const { return parts_.cpus; }
  float interSocketBw() const { return parts_.interSocketBw; }

  // The best path between two Gpu/Nic nodes: NVLink when both ends have it (directly or
  // through NVSwitch), else the PCI tree and, between sockets, the inter-socket link.
  TopoPath path(int from, int to) const;
  // The NICs with the best path from `gpu` (same path type and bandwidth), in document
  // order; empty when there is none or `gpu` is not a node index.
  std::vector<int> nearestNics(int gpu) const;
  // The NIC `gpu` leaves through: one of its nearestNics, dealt in turn to the GPUs (in
  // document order) that share them, so two GPUs with two equally near NICs use one each;
  // -1 if there is none.
  int nearestNic(int gpu) const;

 private:
  TopoPath pciPath(int from, int to) const;
  float nvlinkBw(int from, int to) const;

  Parts parts_;
};

// NCCL's bandwidth figures (GB/s): PCIe by generation and width, NVLink per link by GPU
// generation, the link between CPU sockets by CPU.
float pciBandwidth(const std::string& linkSpeed, int linkWidth);
float nvlinkBandwidthPerLink(int sm);
float interSocketBandwidth(const std::string& arch, const std::string& vendor, int familyId, int modelId);

}  // namespace chorus::topo
