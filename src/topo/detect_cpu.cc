#include "src/topo/detect_cpu.h"

#include <sys/utsname.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/debug.h"
#include "src/topo/hwloc_api.h"

namespace chorus::topo {

namespace {

constexpr unsigned kNvidiaVendor = 0x10de;

// The PCI devices NCCL's topology holds; bridges are kept only on the way to one of them.
enum class PciKind { Other, Gpu, Nic, NvSwitch };

PciKind pciKind(unsigned classCode, unsigned vendor) {
  if ((classCode >> 16) == 0x02) return PciKind::Nic;  // Ethernet 0x0200xx, InfiniBand 0x0207xx
  if ((classCode >> 16) == 0x03 && vendor == kNvidiaVendor) return PciKind::Gpu;
  if ((classCode >> 8) == 0x0680 && vendor == kNvidiaVendor) return PciKind::NvSwitch;
  return PciKind::Other;
}

// The first line of a sysfs or proc file, without trailing white space.
bool readLine(const std::string& path, std::string* out) {
  std::ifstream file(path);
  if (!file || !std::getline(file, *out)) return false;
  while (!out->empty() && isspace(static_cast<unsigned char>(out->back()))) out->pop_back();
  return true;
}

std::string hexText(unsigned value, int digits) {
  char text[16];
  snprintf(text, sizeof(text), "0x%0*x", digits, value);
  return text;
}

// What NCCL writes about the processors: arch as NCCL names it, and cpuid's identity on x86.
struct CpuIdentity {
  std::string arch, vendor, familyId, modelId;
};

CpuIdentity readCpuIdentity(const std::string& cpuinfoPath) {
  CpuIdentity id;
  utsname name{};
  if (uname(&name) == 0) {
    std::string machine = name.machine;
    if (machine == "aarch64" || machine == "arm64")
      id.arch = "arm64";
    else if (machine.starts_with("ppc64"))
      id.arch = "ppc64";
    else
      id.arch = machine;
  }
  std::ifstream cpuinfo(cpuinfoPath);
  std::string line;
  while (std::getline(cpuinfo, line) && line.find_first_not_of(" \t") != std::string::npos) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string value = line.substr(std::min(line.size(), colon + 2));
    if (key == "vendor_id")
      id.vendor = value;
    else if (key == "cpu family")
      id.familyId = value;
    else if (key == "model")
      id.modelId = value;
  }
  return id;
}

XmlNode* findCpu(XmlNode* system, int numaId) {
  for (XmlNode& child : system->children) {
    const std::string* id = child.name == "cpu" ? child.attr("numaid") : nullptr;
    if (id != nullptr && *id == std::to_string(numaId)) return &child;
  }
  return nullptr;
}

// The <cpu> of `numaId`, else the first one, else a new <cpu numaid="0">.
XmlNode* cpuForNuma(XmlNode* system, int numaId) {
  if (XmlNode* cpu = numaId >= 0 ? findCpu(system, numaId) : nullptr) return cpu;
  if (XmlNode* cpu = system->child("cpu")) return cpu;
  XmlNode& cpu = system->addChild("cpu");
  cpu.setAttr("numaid", "0");
  return &cpu;
}

struct NumaCpus {
  int numaId;
  std::vector<int> cpus;
};

// Adds (or completes) one <cpu> per node, affinities all of the same width.
void addCpuElements(XmlNode* system, const std::vector<NumaCpus>& nodes, const CpuIdentity& id) {
  int highest = 0;
  for (const NumaCpus& node : nodes) highest = std::max(highest, node.cpus.empty() ? 0 : node.cpus.back());
  for (const NumaCpus& node : nodes) {
    XmlNode* cpu = findCpu(system, node.numaId);
    if (cpu == nullptr) {
      cpu = &system->addChild("cpu");
      cpu->setAttr("numaid", std::to_string(node.numaId));
    }
    cpu->setAttr("affinity", formatAffinity(node.cpus, highest / 32 + 1));
    if (!id.arch.empty()) cpu->setAttr("arch", id.arch);
    if (!id.vendor.empty()) cpu->setAttr("vendor", id.vendor);
    if (!id.familyId.empty()) cpu->setAttr("familyid", id.familyId);
    if (!id.modelId.empty()) cpu->setAttr("modelid", id.modelId);
  }
}

// The identity hwloc reports when sysfs has no text for it.
struct PciIds {
  unsigned classCode = 0, vendor = 0, device = 0, subsystemVendor = 0, subsystemDevice = 0;
};

// The smaller of the device's and its upstream port's value, as NCCL reports link speed
// and width (a x16 card in a x8 slot runs at x8); "" when sysfs has neither.
std::string slowerOf(const std::string& devicePath, const char* file) {
  std::string mine, port;
  bool haveMine = readLine(devicePath + "/" + file, &mine);
  bool havePort = readLine(devicePath + "/../" + file, &port);
  if (!haveMine) return havePort ? port : "";
  if (!havePort) return mine;
  return strtod(port.c_str(), nullptr) < strtod(mine.c_str(), nullptr) ? port : mine;
}

// NCCL's <pci> attributes from the device's sysfs directory; hwloc's ids where sysfs has none.
void fillPciAttrs(XmlNode* pci, const std::string& devicePath, const PciIds* fallback) {
  const std::pair<const char*, unsigned> fields[] = {{"class", fallback ? fallback->classCode : 0},
                                                     {"vendor", fallback ? fallback->vendor : 0},
                                                     {"device", fallback ? fallback->device : 0},
                                                     {"subsystem_vendor", fallback ? fallback->subsystemVendor : 0},
                                                     {"subsystem_device", fallback ? fallback->subsystemDevice : 0}};
  for (const auto& [name, value] : fields) {
    std::string text;
    if (!readLine(devicePath + "/" + name, &text)) text = fallback ? hexText(value, name[0] == 'c' ? 6 : 4) : "";
    pci->setAttr(name, text);
  }
  pci->setAttr("link_speed", slowerOf(devicePath, "max_link_speed"));
  pci->setAttr("link_width", slowerOf(devicePath, "max_link_width"));
}

std::string pciDevicePath(const std::string& sysfsRoot, const std::string& busId) {
  return sysfsRoot + "/bus/pci/devices/" + busId;
}

// The <pci> of `busId` wherever it is in the tree, else a new child of `parent`.
XmlNode* findOrAddPci(XmlNode* system, XmlNode* parent, const std::string& busId, const std::string& devicePath,
                      const PciIds* fallback) {
  if (XmlNode* pci = findPciDevice(system, busId)) return pci;
  XmlNode& pci = parent->addChild("pci");
  pci.setAttr("busid", busId);
  fillPciAttrs(&pci, devicePath, fallback);
  return &pci;
}

void ensureNic(XmlNode* pci) {
  if (pci->child("nic") == nullptr) pci->addChild("nic");
}

#if CHORUS_HAVE_HWLOC

std::vector<int> bitmapCpus(const HwlocApi& api, hwloc_const_bitmap_t bitmap) {
  std::vector<int> cpus;
  if (bitmap == nullptr) return cpus;
  for (int cpu = api.bitmapFirst(bitmap); cpu >= 0; cpu = api.bitmapNext(bitmap, cpu)) cpus.push_back(cpu);
  return cpus;
}

std::string hwlocBusId(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci) {
  char text[32];
  snprintf(text, sizeof(text), "%04x:%02x:%02x.%x", static_cast<unsigned>(pci.domain), pci.bus, pci.dev, pci.func);
  return text;
}

PciIds hwlocIds(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci) {
  // hwloc keeps class and subclass; the programming interface byte is sysfs' only.
  return {static_cast<unsigned>(pci.class_id) << 8, pci.vendor_id, pci.device_id, pci.subvendor_id, pci.subdevice_id};
}

bool isPciBridge(hwloc_obj_t obj) {
  return obj->type == HWLOC_OBJ_BRIDGE && obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI;
}

bool leadsToPlacedDevice(hwloc_obj_t obj) {
  if (obj->type == HWLOC_OBJ_PCI_DEVICE) {
    return pciKind(hwlocIds(obj->attr->pcidev).classCode, obj->attr->pcidev.vendor_id) != PciKind::Other;
  }
  if (obj->type != HWLOC_OBJ_BRIDGE) return false;
  for (hwloc_obj_t child = obj->io_first_child; child != nullptr; child = child->next_sibling) {
    if (leadsToPlacedDevice(child)) return true;
  }
  return false;
}

void addHwlocPci(XmlNode* system, XmlNode* parent, hwloc_obj_t obj, const std::string& sysfsRoot) {
  if (!leadsToPlacedDevice(obj)) return;
  if (obj->type == HWLOC_OBJ_PCI_DEVICE) {
    const PciIds ids = hwlocIds(obj->attr->pcidev);
    const std::string busId = hwlocBusId(obj->attr->pcidev);
    XmlNode* pci = findOrAddPci(system, parent, busId, pciDevicePath(sysfsRoot, busId), &ids);
    if (pciKind(ids.classCode, ids.vendor) == PciKind::Nic) ensureNic(pci);
    return;
  }
  XmlNode* below = parent;  // a host bridge has no bus id: its devices hang from the <cpu>
  if (isPciBridge(obj)) {
    const PciIds ids = hwlocIds(obj->attr->bridge.upstream.pci);
    const std::string busId = hwlocBusId(obj->attr->bridge.upstream.pci);
    below = findOrAddPci(system, parent, busId, pciDevicePath(sysfsRoot, busId), &ids);
  }
  for (hwloc_obj_t child = obj->io_first_child; child != nullptr; child = child->next_sibling) {
    addHwlocPci(system, below, child, sysfsRoot);
  }
}

// The <cpu> whose NUMA node holds the host bridge's nearest non-I/O ancestor.
XmlNode* cpuForHostBridge(XmlNode* system, const HwlocApi& api, hwloc_obj_t bridge) {
  hwloc_obj_t ancestor = bridge->parent;
  while (ancestor != nullptr && (ancestor->type == HWLOC_OBJ_BRIDGE || ancestor->type == HWLOC_OBJ_PCI_DEVICE ||
                                 ancestor->type == HWLOC_OBJ_OS_DEVICE)) {
    ancestor = ancestor->parent;
  }
  int numaId = ancestor != nullptr && ancestor->nodeset != nullptr ? api.bitmapFirst(ancestor->nodeset) : -1;
  return cpuForNuma(system, numaId);
}

void overrideFromHwloc(const HwlocApi& api, hwloc_topology_t topology, CpuIdentity* id) {
  int depth = api.getTypeDepth(topology, HWLOC_OBJ_PACKAGE);
  if (depth < 0 || api.getNbobjsByDepth(topology, depth) == 0) return;
  hwloc_obj_t package = api.getObjByDepth(topology, depth, 0);
  if (const char* vendor = hwloc_obj_get_info_by_name(package, "CPUVendor")) id->vendor = vendor;
  if (const char* family = hwloc_obj_get_info_by_name(package, "CPUFamilyNumber")) id->familyId = family;
  if (const char* model = hwloc_obj_get_info_by_name(package, "CPUModelNumber")) id->modelId = model;
}

#endif  // CHORUS_HAVE_HWLOC

bool isHexDigits(std::string_view text, size_t count) {
  return text.size() == count && std::all_of(text.begin(), text.end(), [](char c) { return isxdigit(c); });
}

}  // namespace

bool parseCpuList(std::string_view text, std::vector<int>* cpus) {
  cpus->clear();
  while (!text.empty() && isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  size_t start = 0;
  while (start < text.size()) {
    size_t end = std::min(text.find(',', start), text.size());
    std::string range(text.substr(start, end - start));
    char* rest = nullptr;
    long first = strtol(range.c_str(), &rest, 10);
    long last = first;
    if (rest == range.c_str() || first < 0) return false;
    if (*rest == '-') {
      const char* lastText = rest + 1;
      last = strtol(lastText, &rest, 10);
      if (rest == lastText || last < first) return false;
    }
    if (*rest != '\0' || last >= (1 << 20)) return false;
    for (long cpu = first; cpu <= last; ++cpu) cpus->push_back(static_cast<int>(cpu));
    start = end + 1;
  }
  std::sort(cpus->begin(), cpus->end());
  cpus->erase(std::unique(cpus->begin(), cpus->end()), cpus->end());
  return true;
}

std::string formatAffinity(const std::vector<int>& cpus, int words) {
  for (int cpu : cpus) words = std::max(words, cpu / 32 + 1);
  std::vector<uint32_t> bits(std::max(words, 1), 0);
  for (int cpu : cpus) bits[cpu / 32] |= uint32_t(1) << (cpu % 32);
  std::string text;
  for (size_t word = bits.size(); word-- > 0;) {
    char hex[12];
    snprintf(hex, sizeof(hex), "%08x", bits[word]);
    if (!text.empty()) text += ',';
    text += hex;
  }
  return text;
}

std::string normalizeBusId(std::string_view busId) {
  // [domain:]bus:device.function, the domain 4 (sysfs) or 8 (NVML) hex digits.
  size_t lastColon = busId.rfind(':');
  size_t dot = busId.rfind('.');
  if (lastColon == std::string_view::npos || dot == std::string_view::npos || dot < lastColon) return "";
  size_t firstColon = busId.find(':');
  std::string_view domain = firstColon == lastColon ? "0000" : busId.substr(0, firstColon);
  std::string_view bus = busId.substr(firstColon == lastColon ? 0 : firstColon + 1,
                                      lastColon - (firstColon == lastColon ? 0 : firstColon + 1));
  std::string_view device = busId.substr(lastColon + 1, dot - lastColon - 1);
  std::string_view function = busId.substr(dot + 1);
  if (!(isHexDigits(domain, 4) || isHexDigits(domain, 8)) || !isHexDigits(bus, 2) || !isHexDigits(device, 2) ||
      !isHexDigits(function, 1)) {
    return "";
  }
  unsigned long domainValue = strtoul(std::string(domain).c_str(), nullptr, 16);
  char text[32];
  snprintf(text, sizeof(text), "%04lx:%.2s:%.2s.%.1s", domainValue, bus.data(), device.data(), function.data());
  std::string result = text;
  for (char& c : result) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return result;
}

XmlNode* findPciDevice(XmlNode* node, std::string_view busId) {
  if (node == nullptr) return nullptr;
  for (XmlNode& child : node->children) {
    const std::string* id = child.name == "pci" ? child.attr("busid") : nullptr;
    if (id != nullptr && *id == busId) return &child;
    if (XmlNode* found = findPciDevice(&child, busId)) return found;
  }
  return nullptr;
}

ncclResult_t ensurePciDevice(XmlNode* system, const std::string& sysfsRoot, std::string_view busId, XmlNode** pci) {
  if (system == nullptr || pci == nullptr) {
    WARN("ensurePciDevice: system=%p and pci=%p must not be null", static_cast<void*>(system), static_cast<void*>(pci));
    return ncclInvalidArgument;
  }
  const std::string id = normalizeBusId(busId);
  if (id.empty()) {
    WARN("ensurePciDevice: busId '%.*s' is not a PCI bus id ([domain:]bus:device.function)",
         static_cast<int>(busId.size()), busId.data());
    return ncclInvalidArgument;
  }
  if ((*pci = findPciDevice(system, id)) != nullptr) return ncclSuccess;
  const std::string link = pciDevicePath(sysfsRoot, id);
  char* resolved = realpath(link.c_str(), nullptr);
  if (resolved == nullptr) {
    INFO(kSubsysGraph, "Topology detection: %s not resolved (realpath: %s); %s placed under the first CPU",
         link.c_str(), strerror(errno), id.c_str());
    *pci = findOrAddPci(system, cpuForNuma(system, -1), id, link, nullptr);
    return ncclSuccess;
  }
  const std::string path = resolved;
  free(resolved);
  std::string numaText;
  int numaId = readLine(path + "/numa_node", &numaText) ? atoi(numaText.c_str()) : -1;
  XmlNode* parent = cpuForNuma(system, numaId);
  // /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0: each bus id on the way is a bridge.
  bool reached = false;
  for (size_t start = 0; start < path.size();) {
    size_t end = std::min(path.find('/', start), path.size());
    std::string component = path.substr(start, end - start);
    if (component.size() == 12 && normalizeBusId(component) == component) {
      parent = findOrAddPci(system, parent, component, path.substr(0, end), nullptr);
      reached = component == id;
    }
    start = end + 1;
  }
  if (!reached) {
    INFO(kSubsysGraph, "Topology detection: %s is not a PCI device path; %s placed alone", path.c_str(), id.c_str());
    parent = findOrAddPci(system, cpuForNuma(system, numaId), id, link, nullptr);
  }
  *pci = parent;
  return ncclSuccess;
}

ncclResult_t addPciDevicesFromSysfs(XmlNode* system, const std::string& sysfsRoot) {
  if (system == nullptr) {
    WARN("addPciDevicesFromSysfs: system must not be null");
    return ncclInvalidArgument;
  }
  std::error_code error;
  std::vector<std::string> busIds;
  for (const auto& entry : std::filesystem::directory_iterator(sysfsRoot + "/bus/pci/devices", error)) {
    busIds.push_back(entry.path().filename().string());
  }
  std::sort(busIds.begin(), busIds.end());
  for (const std::string& busId : busIds) {
    std::string classText, vendorText;
    const std::string path = pciDevicePath(sysfsRoot, busId);
    if (normalizeBusId(busId) != busId || !readLine(path + "/class", &classText) ||
        !readLine(path + "/vendor", &vendorText)) {
      continue;
    }
    PciKind kind = pciKind(strtoul(classText.c_str(), nullptr, 16), strtoul(vendorText.c_str(), nullptr, 16));
    if (kind == PciKind::Other) continue;
    XmlNode* pci = nullptr;
    CHORUS_CHECK(ensurePciDevice(system, sysfsRoot, busId, &pci));
    if (kind == PciKind::Nic) ensureNic(pci);
  }
  return ncclSuccess;
}

ncclResult_t addCpusFromSysfs(XmlNode* system, const std::string& sysfsRoot, const std::string& cpuinfoPath) {
  if (system == nullptr) {
    WARN("addCpusFromSysfs: system must not be null");
    return ncclInvalidArgument;
  }
  std::vector<NumaCpus> nodes;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(sysfsRoot + "/devices/system/node", error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("node") || name.size() == 4 ||
        !std::all_of(name.begin() + 4, name.end(), [](char c) { return isdigit(c); })) {
      continue;
    }
    NumaCpus node{atoi(name.c_str() + 4), {}};
    std::string list;
    if (readLine(entry.path().string() + "/cpulist", &list) && parseCpuList(list, &node.cpus) && !node.cpus.empty()) {
      nodes.push_back(std::move(node));
    }
  }
  if (nodes.empty()) {
    const std::string online = sysfsRoot + "/devices/system/cpu/online";
    NumaCpus all{0, {}};
    std::string list;
    if (!readLine(online, &list) || !parseCpuList(list, &all.cpus) || all.cpus.empty()) {
      WARN("Topology detection: no NUMA node with CPUs under %s/devices/system/node and no CPU list in %s ('%s')",
           sysfsRoot.c_str(), online.c_str(), list.c_str());
      return ncclSystemError;
    }
    nodes.push_back(std::move(all));
  }
  std::sort(nodes.begin(), nodes.end(), [](const NumaCpus& a, const NumaCpus& b) { return a.numaId < b.numaId; });
  addCpuElements(system, nodes, readCpuIdentity(cpuinfoPath));
  return ncclSuccess;
}

ncclResult_t addCpusFromHwloc(XmlNode* system, const std::string& sysfsRoot, const std::string& cpuinfoPath,
                              bool* used) {
  if (system == nullptr || used == nullptr) {
    WARN("addCpusFromHwloc: system=%p and used=%p must not be null", static_cast<void*>(system),
         static_cast<void*>(used));
    return ncclInvalidArgument;
  }
  *used = false;
#if CHORUS_HAVE_HWLOC
  std::string why;
  const HwlocApi* api = hwlocApi(&why);
  HwlocTopology topology;
  if (api == nullptr || !topology.load(api, &why)) {
    INFO(kSubsysGraph, "Topology detection: hwloc unavailable (%s); reading sysfs", why.c_str());
    return ncclSuccess;
  }
  hwloc_topology_t t = topology.get();
  std::vector<NumaCpus> nodes;
  unsigned count = api->getNbobjsByDepth(t, HWLOC_TYPE_DEPTH_NUMANODE);
  for (unsigned i = 0; i < count; ++i) {
    hwloc_obj_t node = api->getObjByDepth(t, HWLOC_TYPE_DEPTH_NUMANODE, i);
    NumaCpus numa{static_cast<int>(node->os_index), bitmapCpus(*api, node->cpuset)};
    if (!numa.cpus.empty()) nodes.push_back(std::move(numa));  // memory-only nodes hold no CPU to place
  }
  if (nodes.empty()) {
    INFO(kSubsysGraph, "Topology detection: hwloc reports no NUMA node with CPUs; reading sysfs");
    return ncclSuccess;
  }
  *used = true;
  CpuIdentity id = readCpuIdentity(cpuinfoPath);
  overrideFromHwloc(*api, t, &id);
  addCpuElements(system, nodes, id);
  unsigned bridges = api->getNbobjsByDepth(t, HWLOC_TYPE_DEPTH_BRIDGE);
  for (unsigned i = 0; i < bridges; ++i) {
    hwloc_obj_t bridge = api->getObjByDepth(t, HWLOC_TYPE_DEPTH_BRIDGE, i);
    if (bridge->attr->bridge.upstream_type != HWLOC_OBJ_BRIDGE_HOST) continue;
    addHwlocPci(system, cpuForHostBridge(system, *api, bridge), bridge, sysfsRoot);
  }
#else
  (void)sysfsRoot;
  (void)cpuinfoPath;
  INFO(kSubsysGraph, "Topology detection: built without hwloc.h; reading sysfs");
#endif
  return ncclSuccess;
}

}  // namespace chorus::topo
