// Ring search over a TopoSystem: the order in which a host's GPUs form the ring, the
// NIC each channel leaves a host through, and the AllReduce bandwidth that predicts, for
// `hosts` hosts of the same shape (NCCL's graph search, reduced to rings for now).
#pragma once

#include <vector>

#include "src/topo/topo_system.h"

namespace chorus::topo {

struct RingPlan {
  std::vector<int> order;     // one host's GPU nodes in ring order
  std::vector<int> nicOfGpu;  // per entry of `order`: its nearest NIC node (-1: none)
  int socketCrossings = 0;    // a host's ring hops that cross the sockets' link
  PathType worstHop = PathType::NVL;
  float intraBw = 0;  // GB/s: the narrowest hop inside a host
  int channels = 1;   // rings; across hosts, one per distinct NIC
  float interBw = 0;  // GB/s: what the channels' NICs carry together (hosts > 1)
  float busBw = 0;    // predicted ring AllReduce bus bandwidth, GB/s
  float algBw = 0;    // busBw * n / (2 (n - 1)) for n ranks
};

// Within a host the ring takes the GPUs socket by socket, in PCI tree order, so GPUs that
// share a switch are neighbours and the sockets' link is crossed only where the ring must
// (twice for a one-host ring over two sockets, once for a host's chain of a multi-host
// ring, never over NVLink). Across hosts each channel leaves through a different NIC, the
// one nearest to the GPU it leaves from.
RingPlan searchRing(const TopoSystem& system, int hosts);

// Trees as NCCL builds them: inside a host a chain in the ring's order; across hosts a
// double binary tree between the hosts' chain heads, through each chain head's NIC.
struct TreePlan {
  std::vector<int> chain;  // one host's GPU nodes, head first
  float intraBw = 0;       // GB/s: the narrowest hop of the chain
  float interBw = 0;       // GB/s: the chain head's NIC (hosts > 1)
  // Predicted AllReduce algorithm bandwidth: data goes up the tree and back down, each
  // link full duplex, so every link carries it once each way: the narrowest link.
  float algBw = 0;
  float busBw = 0;  // algBw * 2 (n - 1) / n, comparable with the ring's
};
TreePlan searchTree(const TopoSystem& system, int hosts);

// NCCL_GRAPH_DUMP_FILE's content: NCCL's <graphs> XML with the ring and the tree.
XmlNode graphsXml(const TopoSystem& system, const RingPlan& ring, const TreePlan& tree, int hosts);

}  // namespace chorus::topo
