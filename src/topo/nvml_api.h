// NVML, loaded at run time (libnvidia-ml.so.1 ships with the driver; no nvml.h is needed
// to build): which NVIDIA GPUs this machine has, their compute capability and NVLinks.
// Without the library, or when nvmlInit fails, detection has no GPUs from NVML; that is
// one INFO line, never an error. The types below are the few of NVIDIA's documented ABI
// that the calls in the table take.
#pragma once

#include <memory>
#include <string>

#include "nccl.h"
#include "src/topo/topo_xml.h"

namespace chorus::topo {

inline constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

namespace nvml {
using Return = int;  // nvmlReturn_t
inline constexpr Return kSuccess = 0;
using Device = struct DeviceOpaque*;                                                  // nvmlDevice_t
enum EnableState : int { kDisabled = 0, kEnabled = 1 };                               // nvmlEnableState_t
enum NvLinkCapability : int { kP2pSupported = 0 };                                    // nvmlNvLinkCapability_t
enum NvLinkDeviceType : int { kGpu = 0, kIbmNpu = 1, kSwitch = 2, kUnknown = 0xff };  // nvmlIntNvLinkDeviceType_t
// nvmlPciInfo_t as nvmlDeviceGetPciInfo_v3 and nvmlDeviceGetNvLinkRemotePciInfo_v2 fill it.
struct PciInfo {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];  // "00000000:19:00.0"
};
static_assert(sizeof(PciInfo) == 68, "nvmlPciInfo_t layout");
}  // namespace nvml

struct NvmlApi {
  nvml::Return (*init)() = nullptr;  // nvmlInit_v2
  nvml::Return (*deviceGetCount)(unsigned* count) = nullptr;
  nvml::Return (*deviceGetHandleByIndex)(unsigned index, nvml::Device* device) = nullptr;
  nvml::Return (*deviceGetPciInfo)(nvml::Device device, nvml::PciInfo* pci) = nullptr;
  nvml::Return (*deviceGetCudaComputeCapability)(nvml::Device device, int* major, int* minor) = nullptr;
  nvml::Return (*deviceGetNvLinkState)(nvml::Device device, unsigned link, nvml::EnableState* active) = nullptr;
  nvml::Return (*deviceGetNvLinkRemotePciInfo)(nvml::Device device, unsigned link, nvml::PciInfo* pci) = nullptr;
  nvml::Return (*deviceGetNvLinkCapability)(nvml::Device device, unsigned link, nvml::NvLinkCapability capability,
                                            unsigned* result) = nullptr;
  // Optional (drivers from CUDA 11 on): says outright that a link ends at an NVSwitch.
  nvml::Return (*deviceGetNvLinkRemoteDeviceType)(nvml::Device device, unsigned link,
                                                  nvml::NvLinkDeviceType* type) = nullptr;

  // Keeps the library loaded while this table is alive (dlclose on destruction).
  std::shared_ptr<void> library;
};

// The process-wide table, loaded and initialized (nvmlInit_v2) on first use; null when the
// library, one of its required functions or nvmlInit is missing or fails, `*why` saying which.
const NvmlApi* nvmlApi(std::string* why);

// Loads `library` into `*api` without initializing NVML or caching: the work behind
// nvmlApi(), and a test hook for the failure paths.
bool loadNvmlApi(const char* library, NvmlApi* api, std::string* why);

// Adds a <gpu dev="<NVML index>" sm="<major*10+minor>"> under each NVIDIA GPU's <pci>
// (added with its bridges from sysfs when missing), then its NVLinks: one
// <nvlink target="<busid>" count="<links>" tclass="<class of the far end>"> per remote
// device, NVSwitches (and far ends not visible here, as NCCL assumes) as 0x068000.
// `api` null: no GPUs, success.
ncclResult_t addNvmlGpus(XmlNode* system, const std::string& sysfsRoot, const NvmlApi* api);

}  // namespace chorus::topo
