#include "src/topo/topo_system.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

#include "core/debug.h"

namespace chorus::topo {

namespace {

// NCCL's figures (GB/s).
constexpr float kSkylakeQpiBw = 10.0f;
constexpr float kSapphireRapidsQpiBw = 22.0f;
constexpr float kEmeraldRapidsQpiBw = 40.0f;
constexpr float kOlderQpiBw = 6.0f;
constexpr float kAmdBw = 16.0f;
constexpr float kOtherCpuBw = 6.0f;
constexpr int kUnknownPciWidth = 16;  // NCCL's width for link_width="0" (sysfs could not tell)
constexpr float kSameBw = 1e-3f;      // GB/s: paths this close are equally good
constexpr const char* kNvSwitchClass = "0x068000";

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string attrOr(const XmlNode& node, const char* key, const char* fallback = "") {
  const std::string* value = node.attr(key);
  return value != nullptr ? *value : fallback;
}

struct PendingNvLink {
  int gpu;
  std::string target;
  int count;
  std::string tclass;
};

class Builder {
 public:
  explicit Builder(TopoSystem::Parts* parts, std::string* error) : p_(parts), error_(error) {}

  ncclResult_t fail(const XmlNode& node, const std::string& what) {
    *error_ = "line " + std::to_string(node.line) + ": <" + node.name + ">: " + what;
    return ncclInvalidUsage;
  }

  ncclResult_t require(const XmlNode& node, const char* key, std::string* value) {
    const std::string* found = node.attr(key);
    if (found == nullptr || found->empty()) return fail(node, std::string("missing attribute '") + key + "'");
    *value = *found;
    return ncclSuccess;
  }

  ncclResult_t requireInt(const XmlNode& node, const char* key, int* value) {
    std::string text;
    CHORUS_CHECK(require(node, key, &text));
    char* end = nullptr;
    const long parsed = std::strtol(text.c_str(), &end, 0);
    if (end == text.c_str() || *end != '\0' || parsed < 0 || parsed > std::numeric_limits<int>::max()) {
      return fail(node, std::string("attribute '") + key + "' is not a number: \"" + text + "\"");
    }
    *value = static_cast<int>(parsed);
    return ncclSuccess;
  }

  // A node of the PCI tree: below `parent`, in socket `cpuIndex`, `upBw` GB/s to its parent.
  static TopoNode treeNode(NodeKind kind, std::string id, int parent, int cpuIndex, float upBw) {
    TopoNode node;
    node.kind = kind;
    node.id = std::move(id);
    node.parent = parent;
    node.cpu = cpuIndex;
    node.upBw = upBw;
    return node;
  }

  int add(TopoNode node) {
    p_->nodes.push_back(std::move(node));
    return static_cast<int>(p_->nodes.size()) - 1;
  }

  ncclResult_t cpu(const XmlNode& xml) {
    TopoNode node;
    node.kind = NodeKind::Cpu;
    node.id = "cpu" + attrOr(xml, "numaid", std::to_string(p_->cpus.size()).c_str());
    const int index = add(node);
    p_->nodes[index].cpu = index;
    p_->cpus.push_back(index);
    const float bw = interSocketBandwidth(attrOr(xml, "arch"), attrOr(xml, "vendor"),
                                          std::atoi(attrOr(xml, "familyid", "0").c_str()),
                                          std::atoi(attrOr(xml, "modelid", "0").c_str()));
    p_->interSocketBw = p_->cpus.size() == 1 ? bw : std::min(p_->interSocketBw, bw);
    return children(xml, index, index);
  }

  ncclResult_t children(const XmlNode& xml, int parent, int cpuIndex) {
    for (const XmlNode& child : xml.children) {
      if (child.name == "pci") CHORUS_CHECK(pci(child, parent, cpuIndex));
      if (child.name == "nic") CHORUS_CHECK(nic(child, nullptr, parent, cpuIndex, 0));
    }
    return ncclSuccess;
  }

  ncclResult_t pci(const XmlNode& xml, int parent, int cpuIndex) {
    std::string busId;
    CHORUS_CHECK(require(xml, "busid", &busId));
    busId = lower(busId);
    // Detection writes empty link attributes when sysfs cannot tell them, and virtual
    // machines report link_width="0" under a real speed (IBM's H100 VSI file: Gen5, width 0).
    // NCCL reads a width of 0 as x16 and an unknown speed as Gen3, so do the same.
    const std::string speed = attrOr(xml, "link_speed");
    const int width = std::atoi(attrOr(xml, "link_width", "0").c_str());
    const float bw = pciBandwidth(speed, width > 0 ? width : kUnknownPciWidth);
    if (const XmlNode* gpuXml = xml.child("gpu")) return gpu(*gpuXml, busId, parent, cpuIndex, bw);
    if (const XmlNode* nicXml = xml.child("nic")) return nic(*nicXml, &busId, parent, cpuIndex, bw);
    return children(xml, add(treeNode(NodeKind::PciSwitch, busId, parent, cpuIndex, bw)), cpuIndex);
  }

  ncclResult_t gpu(const XmlNode& xml, const std::string& busId, int parent, int cpuIndex, float bw) {
    TopoNode node = treeNode(NodeKind::Gpu, busId, parent, cpuIndex, bw);
    CHORUS_CHECK(requireInt(xml, "dev", &node.gpuDev));
    CHORUS_CHECK(requireInt(xml, "sm", &node.sm));
    const int index = add(node);
    p_->gpus.push_back(index);
    for (const XmlNode* link : xml.childrenNamed("nvlink")) {
      PendingNvLink pending{index, "", 0, attrOr(*link, "tclass")};
      CHORUS_CHECK(require(*link, "target", &pending.target));
      CHORUS_CHECK(requireInt(*link, "count", &pending.count));
      pending.target = lower(pending.target);
      nvlinks_.push_back(pending);
    }
    return ncclSuccess;
  }

  // A NIC: under a <pci> (busId set) or straight under a <cpu> (NCCL's layout for NICs
  // whose PCI path is unknown); its bandwidth is its fastest port's.
  ncclResult_t nic(const XmlNode& xml, const std::string* busId, int parent, int cpuIndex, float bw) {
    TopoNode node = treeNode(NodeKind::Nic, "", parent, cpuIndex, 0);  // id and upBw once its ports are read
    for (const XmlNode* net : xml.childrenNamed("net")) {
      std::string name;
      int speed = 0;
      CHORUS_CHECK(require(*net, "name", &name));
      CHORUS_CHECK(requireInt(*net, "speed", &speed));
      node.netNames.push_back(name);
      node.netBw = std::max(node.netBw, speed / 8000.0f);  // Mb/s -> GB/s
    }
    if (node.netNames.empty()) return ncclSuccess;  // a NIC no net uses (e.g. a socket NIC): not a path end
    node.id = busId != nullptr ? *busId : node.netNames.front();
    node.upBw = busId != nullptr ? bw : node.netBw;
    p_->nics.push_back(add(node));
    return ncclSuccess;
  }

  // NVLinks name their far end by bus id: a GPU, or (class 0x068000) an NVSwitch, which
  // the model merges into one node as NCCL does.
  ncclResult_t resolveNvLinks() {
    int nvSwitch = -1;
    for (const PendingNvLink& link : nvlinks_) {
      TopoNode& from = p_->nodes[link.gpu];
      const float bw = link.count * nvlinkBandwidthPerLink(from.sm);
      int to = -1;
      for (int g : p_->gpus) {
        if (p_->nodes[g].id == link.target) to = g;
      }
      if (to < 0 && link.tclass == kNvSwitchClass) {
        if (nvSwitch < 0) {
          TopoNode node;
          node.kind = NodeKind::NvSwitch;
          node.id = "nvswitch";
          nvSwitch = add(node);
        }
        to = nvSwitch;
      }
      if (to < 0) continue;  // a CPU or an unknown device: no GPU-to-GPU path through it
      p_->nodes[link.gpu].nvlinks.push_back({to, bw});
    }
    return ncclSuccess;
  }

 private:
  TopoSystem::Parts* p_;
  std::string* error_;
  std::vector<PendingNvLink> nvlinks_;
};

}  // namespace

float pciBandwidth(const std::string& linkSpeed, int linkWidth) {
  // NCCL's table: the lane rate in units of 100 Mb/s of payload, by transfer rate.
  const float gts = std::strtof(linkSpeed.c_str(), nullptr);
  float lane = 60;  // 8 GT/s, Gen3
  if (gts >= 64) {
    lane = 480;
  } else if (gts >= 32) {
    lane = 240;
  } else if (gts >= 16) {
    lane = 120;
  } else if (gts >= 8) {
    lane = 60;
  } else if (gts >= 5) {
    lane = 30;
  } else if (gts > 0) {
    lane = 15;
  }
  return lane * std::max(linkWidth, 1) / 80.0f;
}

float nvlinkBandwidthPerLink(int sm) {
  if (sm >= 100) return 40.1f;
  if (sm >= 90) return 20.6f;
  if (sm == 86 || sm == 87 || sm == 89) return 12.0f;
  if (sm >= 70) return 20.0f;
  return 18.0f;
}

float interSocketBandwidth(const std::string& arch, const std::string& vendor, int familyId, int modelId) {
  if (arch != "x86_64") return kOtherCpuBw;
  if (vendor == "AuthenticAMD") return kAmdBw;
  if (vendor != "GenuineIntel" || familyId != 6) return kOtherCpuBw;
  if (modelId >= 0xCF) return kEmeraldRapidsQpiBw;
  if (modelId >= 0x8F) return kSapphireRapidsQpiBw;
  if (modelId >= 0x55) return kSkylakeQpiBw;
  return kOlderQpiBw;
}

ncclResult_t TopoSystem::fromXml(const XmlNode& system, TopoSystem* out, std::string* error) {
  if (out == nullptr || error == nullptr) return ncclInvalidArgument;
  Parts parts;
  Builder builder(&parts, error);
  if (system.name != "system") return builder.fail(system, "the root must be <system>");
  for (const XmlNode* cpu : system.childrenNamed("cpu")) CHORUS_CHECK(builder.cpu(*cpu));
  if (parts.cpus.empty()) return builder.fail(system, "no <cpu>");
  CHORUS_CHECK(builder.resolveNvLinks());
  out->parts_ = std::move(parts);
  return ncclSuccess;
}

float TopoSystem::nvlinkBw(int from, int to) const {
  float direct = 0;
  float fromSwitch = 0;
  float toSwitch = 0;
  for (const TopoNode::NvLink& link : parts_.nodes[from].nvlinks) {
    if (link.to == to) direct += link.bw;
    if (parts_.nodes[link.to].kind == NodeKind::NvSwitch) fromSwitch += link.bw;
  }
  for (const TopoNode::NvLink& link : parts_.nodes[to].nvlinks) {
    if (parts_.nodes[link.to].kind == NodeKind::NvSwitch) toSwitch += link.bw;
  }
  return std::max(direct, std::min(fromSwitch, toSwitch));
}

TopoPath TopoSystem::pciPath(int from, int to) const {
  // Each side's chain up its PCI tree to (and including) its CPU.
  auto chain = [this](int node) {
    std::vector<int> up;
    for (int at = node; at >= 0; at = parts_.nodes[at].parent) up.push_back(at);
    return up;
  };
  const std::vector<int> a = chain(from);
  const std::vector<int> b = chain(to);
  float bw = std::numeric_limits<float>::max();
  for (size_t i = 0; i < a.size(); ++i) {
    auto common = std::find(b.begin(), b.end(), a[i]);
    if (common == b.end()) continue;
    const size_t j = static_cast<size_t>(common - b.begin());
    for (size_t k = 0; k < i; ++k) bw = std::min(bw, parts_.nodes[a[k]].upBw);
    for (size_t k = 0; k < j; ++k) bw = std::min(bw, parts_.nodes[b[k]].upBw);
    PathType type = PathType::PXB;
    if (parts_.nodes[a[i]].kind == NodeKind::Cpu) {
      type = PathType::PHB;
    } else if (i <= 1 && j <= 1) {
      type = PathType::PIX;
    }
    return {type, bw};
  }
  for (size_t k = 0; k + 1 < a.size(); ++k) bw = std::min(bw, parts_.nodes[a[k]].upBw);
  for (size_t k = 0; k + 1 < b.size(); ++k) bw = std::min(bw, parts_.nodes[b[k]].upBw);
  return {PathType::SYS, std::min(bw, parts_.interSocketBw)};
}

TopoPath TopoSystem::path(int from, int to) const {
  if (from == to) return {PathType::NVL, std::numeric_limits<float>::max()};
  const float nvl = nvlinkBw(from, to);
  if (nvl > 0) return {PathType::NVL, nvl};
  return pciPath(from, to);
}

std::vector<int> TopoSystem::nearestNics(int gpu) const {
  std::vector<int> best;
  if (gpu < 0 || gpu >= static_cast<int>(parts_.nodes.size())) return best;
  TopoPath bestPath;
  for (int nic : parts_.nics) {
    const TopoPath p = path(gpu, nic);
    const bool sameAsBest = !best.empty() && p.type == bestPath.type && std::abs(p.bw - bestPath.bw) <= kSameBw;
    if (sameAsBest) {
      best.push_back(nic);
    } else if (best.empty() || p.type < bestPath.type || (p.type == bestPath.type && p.bw > bestPath.bw)) {
      best = {nic};
      bestPath = p;
    }
  }
  return best;
}

int TopoSystem::nearestNic(int gpu) const {
  const std::vector<int> best = nearestNics(gpu);
  if (best.empty()) return -1;
  // GPUs with the same nearest NICs (Azure ND A100 v4: two GPUs and two NICs behind each
  // switch) take them in turn, in document order, as NCCL's ncclTopoGetLocalNet spreads
  // them by GPU; else every GPU there would leave through the first NIC.
  size_t turn = 0;
  for (int other : parts_.gpus) {
    if (other == gpu) break;
    if (nearestNics(other) == best) ++turn;
  }
  return best[turn % best.size()];
}

}  // namespace chorus::topo
