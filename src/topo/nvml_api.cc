#include "src/topo/nvml_api.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <vector>

#include "core/debug.h"
#include "core/shared_library.h"
#include "src/topo/detect_cpu.h"

namespace chorus::topo {

namespace {

constexpr const char* kNvSwitchClass = "0x068000";

std::string busIdOf(const nvml::PciInfo& pci) {
  std::string text(pci.busId, strnlen(pci.busId, sizeof(pci.busId)));
  std::string busId = normalizeBusId(text);
  if (busId.empty()) {  // older drivers leave busId short; the numeric fields are always there
    char numeric[32];
    snprintf(numeric, sizeof(numeric), "%04x:%02x:%02x.0", pci.domain & 0xffff, pci.bus & 0xff, pci.device & 0xff);
    busId = numeric;
  }
  return busId;
}

// NCCL's bound on the links to ask about, by architecture.
unsigned maxNvLinks(int sm) { return sm < 60 ? 0 : sm < 70 ? 4 : sm < 80 ? 6 : sm < 90 ? 12 : 18; }

struct NvmlGpu {
  nvml::Device device;
  std::string busId;
  int sm;
};

// What the far end of a link is: the class of its <pci> or its sysfs class; a device this
// machine cannot see (an NVSwitch behind a VM, or any NVSwitch port) is an NVSwitch.
std::string targetClass(XmlNode* system, const std::string& sysfsRoot, const std::string& busId, bool isSwitch) {
  if (isSwitch) return kNvSwitchClass;
  if (XmlNode* pci = findPciDevice(system, busId)) {
    if (const std::string* cls = pci->attr("class"); cls != nullptr && !cls->empty()) return *cls;
  }
  std::ifstream file(sysfsRoot + "/bus/pci/devices/" + busId + "/class");
  std::string cls;
  if (file >> cls) return cls;
  return kNvSwitchClass;
}

void addNvLinks(XmlNode* system, const std::string& sysfsRoot, const NvmlApi& api, const NvmlGpu& gpu,
                XmlNode* gpuNode) {
  std::erase_if(gpuNode->children, [](const XmlNode& child) { return child.name == "nvlink"; });
  std::map<std::string, int> linksTo;  // ordered, so the tree does not depend on link numbering
  std::map<std::string, bool> isSwitch;
  for (unsigned link = 0; link < maxNvLinks(gpu.sm); ++link) {
    unsigned p2p = 0;
    nvml::EnableState state = nvml::kDisabled;
    nvml::PciInfo remote{};
    if (api.deviceGetNvLinkCapability(gpu.device, link, nvml::kP2pSupported, &p2p) != nvml::kSuccess || !p2p) continue;
    if (api.deviceGetNvLinkState(gpu.device, link, &state) != nvml::kSuccess || state != nvml::kEnabled) continue;
    if (api.deviceGetNvLinkRemotePciInfo(gpu.device, link, &remote) != nvml::kSuccess) continue;
    const std::string target = busIdOf(remote);
    ++linksTo[target];
    nvml::NvLinkDeviceType type = nvml::kUnknown;
    if (api.deviceGetNvLinkRemoteDeviceType != nullptr &&
        api.deviceGetNvLinkRemoteDeviceType(gpu.device, link, &type) == nvml::kSuccess && type == nvml::kSwitch) {
      isSwitch[target] = true;
    }
  }
  for (const auto& [target, count] : linksTo) {
    XmlNode& nvlink = gpuNode->addChild("nvlink");
    nvlink.setAttr("target", target);
    nvlink.setAttr("count", std::to_string(count));
    nvlink.setAttr("tclass", targetClass(system, sysfsRoot, target, isSwitch[target]));
  }
}

}  // namespace

bool loadNvmlApi(const char* library, NvmlApi* api, std::string* why) {
  *api = NvmlApi{};
  SharedLibrary lib;
  if (!lib.open(library, why)) return false;
  api->library = lib.handle();
  bool ok = lib.resolve("nvmlInit_v2", &api->init, why) &&
            lib.resolve("nvmlDeviceGetCount_v2", &api->deviceGetCount, why) &&
            lib.resolve("nvmlDeviceGetHandleByIndex_v2", &api->deviceGetHandleByIndex, why) &&
            lib.resolve("nvmlDeviceGetPciInfo_v3", &api->deviceGetPciInfo, why) &&
            lib.resolve("nvmlDeviceGetCudaComputeCapability", &api->deviceGetCudaComputeCapability, why) &&
            lib.resolve("nvmlDeviceGetNvLinkState", &api->deviceGetNvLinkState, why) &&
            lib.resolve("nvmlDeviceGetNvLinkRemotePciInfo_v2", &api->deviceGetNvLinkRemotePciInfo, why) &&
            lib.resolve("nvmlDeviceGetNvLinkCapability", &api->deviceGetNvLinkCapability, why);
  if (!ok) {
    *api = NvmlApi{};
    return false;
  }
  std::string optional;  // older drivers lack it: then it stays null
  lib.resolve("nvmlDeviceGetNvLinkRemoteDeviceType", &api->deviceGetNvLinkRemoteDeviceType, &optional);
  return true;
}

const NvmlApi* nvmlApi(std::string* why) {
  // Loaded and initialized once, never shut down: as NCCL, for the life of the process.
  static std::string failure;
  static const NvmlApi* api = [] {
    auto* loaded = new NvmlApi;
    if (loadNvmlApi(kNvmlLibrary, loaded, &failure)) {
      nvml::Return result = loaded->init();
      if (result == nvml::kSuccess) return static_cast<const NvmlApi*>(loaded);
      failure = "nvmlInit_v2 returned " + std::to_string(result);
    }
    delete loaded;
    return static_cast<const NvmlApi*>(nullptr);
  }();
  if (api == nullptr && why != nullptr) *why = failure;
  return api;
}

ncclResult_t addNvmlGpus(XmlNode* system, const std::string& sysfsRoot, const NvmlApi* api) {
  if (system == nullptr) {
    WARN("addNvmlGpus: system must not be null");
    return ncclInvalidArgument;
  }
  if (api == nullptr) return ncclSuccess;
  unsigned count = 0;
  if (nvml::Return result = api->deviceGetCount(&count); result != nvml::kSuccess) {
    INFO(kSubsysGraph, "Topology detection: nvmlDeviceGetCount_v2 returned %d; no GPUs from NVML", result);
    return ncclSuccess;
  }
  std::vector<NvmlGpu> gpus;
  for (unsigned index = 0; index < count; ++index) {
    NvmlGpu gpu{nullptr, "", 0};
    nvml::PciInfo pci{};
    int major = 0, minor = 0;
    if (api->deviceGetHandleByIndex(index, &gpu.device) != nvml::kSuccess ||
        api->deviceGetPciInfo(gpu.device, &pci) != nvml::kSuccess ||
        api->deviceGetCudaComputeCapability(gpu.device, &major, &minor) != nvml::kSuccess) {
      INFO(kSubsysGraph,
           "Topology detection: NVML device %u does not answer (handle, PCI info or compute "
           "capability); skipped",
           index);
      continue;
    }
    gpu.busId = busIdOf(pci);
    gpu.sm = major * 10 + minor;
    XmlNode* pciNode = nullptr;
    CHORUS_CHECK(ensurePciDevice(system, sysfsRoot, gpu.busId, &pciNode));
    XmlNode* gpuNode = pciNode->child("gpu");
    if (gpuNode == nullptr) gpuNode = &pciNode->addChild("gpu");
    gpuNode->setAttr("dev", std::to_string(index));
    gpuNode->setAttr("sm", std::to_string(gpu.sm));
    gpus.push_back(gpu);
  }
  // Links after every GPU is in the tree, so a far GPU's class comes from its <pci>.
  for (const NvmlGpu& gpu : gpus) {
    XmlNode* pciNode = findPciDevice(system, gpu.busId);
    if (pciNode != nullptr && pciNode->child("gpu") != nullptr) {
      addNvLinks(system, sysfsRoot, *api, gpu, pciNode->child("gpu"));
    }
  }
  return ncclSuccess;
}

}  // namespace chorus::topo
