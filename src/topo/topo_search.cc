#include "src/topo/topo_search.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>
#include <string>

namespace chorus::topo {

namespace {

// How good a GPU order is: its narrowest hop first, then fewer hops across the sockets'
// link, then the worst kind of hop.
struct OrderScore {
  float bw = 0;
  int crossings = 0;
  PathType worst = PathType::NVL;
};

bool better(const OrderScore& a, const OrderScore& b) {
  constexpr float kSame = 1e-3f;
  if (a.bw > b.bw + kSame) return true;
  if (a.bw < b.bw - kSame) return false;
  if (a.crossings != b.crossings) return a.crossings < b.crossings;
  return a.worst < b.worst;
}

// Branch and bound over the orders of `start` (its first GPU fixed): a partial order that
// can no longer beat the best complete one is dropped. `start` (socket by socket, in PCI
// tree order) is the first candidate, so a search cut short by the budget still returns
// at least that; with NVLink between some GPUs only (a hybrid cube mesh) it finds a ring
// that stays on NVLink.
class OrderSearch {
 public:
  OrderSearch(const TopoSystem& system, const std::vector<int>& start, bool closed)
      : start_(start), closed_(closed), n_(start.size()), paths_(n_ * n_), used_(n_, false) {
    for (size_t i = 0; i < n_; ++i) {
      for (size_t j = 0; j < n_; ++j) paths_[i * n_ + j] = system.path(start[i], start[j]);
    }
  }

  std::vector<int> run() {
    if (n_ <= 2) return start_;
    for (size_t i = 0; i < n_; ++i) best_.push_back(i);
    bestScore_ = scoreOf(best_);
    current_ = {0};
    used_[0] = true;
    extend({std::numeric_limits<float>::max(), 0, PathType::NVL});
    std::vector<int> order;
    for (size_t i : best_) order.push_back(start_[i]);
    return order;
  }

 private:
  static constexpr long kBudget = 200000;  // partial orders tried, at most

  OrderScore add(OrderScore score, const TopoPath& hop) const {
    score.bw = std::min(score.bw, hop.bw);
    score.crossings += hop.type == PathType::SYS;
    score.worst = std::max(score.worst, hop.type);
    return score;
  }

  OrderScore scoreOf(const std::vector<size_t>& order) const {
    OrderScore score{std::numeric_limits<float>::max(), 0, PathType::NVL};
    for (size_t i = 0; i + 1 < order.size(); ++i) score = add(score, paths_[order[i] * n_ + order[i + 1]]);
    if (closed_) score = add(score, paths_[order.back() * n_ + order.front()]);
    return score;
  }

  void extend(const OrderScore& score) {
    if (++tried_ > kBudget) return;
    if (current_.size() == n_) {
      const OrderScore done = closed_ ? add(score, paths_[current_.back() * n_ + current_.front()]) : score;
      if (better(done, bestScore_)) {
        bestScore_ = done;
        best_ = current_;
      }
      return;
    }
    for (size_t next = 1; next < n_; ++next) {
      if (used_[next]) continue;
      const OrderScore longer = add(score, paths_[current_.back() * n_ + next]);
      if (!better(longer, bestScore_)) continue;  // hops only ever make a score worse
      used_[next] = true;
      current_.push_back(next);
      extend(longer);
      current_.pop_back();
      used_[next] = false;
    }
  }

  const std::vector<int>& start_;
  const bool closed_;
  const size_t n_;
  std::vector<TopoPath> paths_;  // between start_[i] and start_[j]
  std::vector<bool> used_;
  std::vector<size_t> current_, best_;
  OrderScore bestScore_;
  long tried_ = 0;
};

}  // namespace

RingPlan searchRing(const TopoSystem& system, int hosts) {
  RingPlan plan;
  std::vector<int> start = system.gpus();  // document order is the PCI tree's depth-first order
  std::stable_sort(start.begin(), start.end(), [&](int a, int b) { return system.node(a).cpu < system.node(b).cpu; });
  plan.order = OrderSearch(system, start, /*closed=*/hosts <= 1).run();
  const size_t n = plan.order.size();
  if (n == 0) return plan;
  plan.intraBw = std::numeric_limits<float>::max();
  // One host: a cycle. Across hosts each host holds a chain of the ring, entered and left
  // through NICs, so its last GPU does not link back to its first.
  const size_t hops = hosts > 1 ? n - 1 : n;
  for (size_t i = 0; n > 1 && i < hops; ++i) {
    const TopoPath hop = system.path(plan.order[i], plan.order[(i + 1) % n]);
    plan.intraBw = std::min(plan.intraBw, hop.bw);
    plan.worstHop = std::max(plan.worstHop, hop.type);
    if (hop.type == PathType::SYS) ++plan.socketCrossings;
  }
  std::set<int> nics;
  float inter = 0;
  for (int gpu : plan.order) {
    const int nic = system.nearestNic(gpu);
    plan.nicOfGpu.push_back(nic);
    if (nic < 0 || !nics.insert(nic).second) continue;
    // A channel leaves through this NIC from its nearest GPU: the slower of the port
    // and the GPU's path to it.
    inter += std::min(system.node(nic).netBw, system.path(gpu, nic).bw);
  }
  const int ranks = static_cast<int>(n) * std::max(hosts, 1);
  if (hosts > 1) {
    plan.channels = std::max<int>(1, static_cast<int>(nics.size()));
    plan.interBw = inter;
    plan.busBw = n > 1 ? std::min(plan.intraBw, inter) : inter;
  } else {
    plan.busBw = n > 1 ? plan.intraBw : 0;
  }
  if (ranks > 1) plan.algBw = plan.busBw * ranks / (2.0f * (ranks - 1));
  return plan;
}

TreePlan searchTree(const TopoSystem& system, int hosts) {
  TreePlan plan;
  const RingPlan ring = searchRing(system, std::max(hosts, 2));  // its chain order
  plan.chain = ring.order;
  const size_t n = plan.chain.size();
  if (n == 0) return plan;
  plan.intraBw = n > 1 ? ring.intraBw : std::numeric_limits<float>::max();
  float bw = plan.intraBw;
  if (hosts > 1) {
    const int head = plan.chain.front();
    const int nic = system.nearestNic(head);
    plan.interBw = nic < 0 ? 0 : std::min(system.node(nic).netBw, system.path(head, nic).bw);
    bw = std::min(bw, plan.interBw);
  }
  const int ranks = static_cast<int>(n) * std::max(hosts, 1);
  if (ranks > 1) {
    plan.algBw = bw;
    plan.busBw = bw * 2.0f * (ranks - 1) / ranks;
  }
  return plan;
}

namespace {

std::string number(float value) {
  char text[32];
  snprintf(text, sizeof(text), "%g", value);
  return text;
}

// One <graph>: NCCL's pattern numbers (4 ring, 3 tree), one <channel> per channel with
// the GPUs in order, framed by the NICs it enters and leaves through across hosts.
XmlNode graphXml(const TopoSystem& system, int id, int pattern, const std::vector<int>& order,
                 const std::vector<int>& nics, int channels, float intraBw, float interBw, PathType intraType,
                 int hosts) {
  XmlNode graph;
  graph.name = "graph";
  graph.setAttr("id", std::to_string(id));
  graph.setAttr("pattern", std::to_string(pattern));
  graph.setAttr("crossnic", "0");
  graph.setAttr("nchannels", std::to_string(channels));
  graph.setAttr("speedintra", number(intraBw));
  graph.setAttr("speedinter", number(interBw));
  graph.setAttr("latencyinter", "0");
  graph.setAttr("typeintra", pathTypeName(intraType));
  graph.setAttr("typeinter", hosts > 1 ? "PIX" : "LOC");
  graph.setAttr("samechannels", "0");
  const size_t n = order.size();
  for (int c = 0; c < channels && n > 0; ++c) {
    // Channel c starts at GPU c (mod n), so each leaves a host through another GPU's NIC.
    XmlNode& channel = graph.addChild("channel");
    const size_t first = static_cast<size_t>(c) % n;
    auto netOf = [&](size_t at) {
      const int nic = nics[at];
      XmlNode& net = channel.addChild("net");
      net.setAttr("dev", nic < 0 ? "-1" : system.node(nic).netNames.front());
    };
    if (hosts > 1) netOf(first);
    for (size_t k = 0; k < n; ++k) {
      channel.addChild("gpu").setAttr("dev", std::to_string(system.node(order[(first + k) % n]).gpuDev));
    }
    if (hosts > 1) netOf((first + n - 1) % n);
  }
  return graph;
}

}  // namespace

XmlNode graphsXml(const TopoSystem& system, const RingPlan& ring, const TreePlan& tree, int hosts) {
  XmlNode graphs;
  graphs.name = "graphs";
  graphs.setAttr("version", "1");
  std::vector<int> treeNics;
  for (int gpu : tree.chain) treeNics.push_back(system.nearestNic(gpu));
  graphs.children.push_back(
      graphXml(system, 0, 3, tree.chain, treeNics, 1, tree.intraBw, tree.interBw, ring.worstHop, hosts));
  graphs.children.push_back(graphXml(system, 1, 4, ring.order, ring.nicOfGpu, ring.channels, ring.intraBw, ring.interBw,
                                     ring.worstHop, hosts));
  return graphs;
}

}  // namespace chorus::topo
