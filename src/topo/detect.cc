#include "src/topo/detect.h"

#include "core/debug.h"
#include "src/topo/detect_cpu.h"
#include "src/topo/detect_ib.h"
#include "src/topo/nvml_api.h"

namespace chorus::topo {

ncclResult_t detectTopology(XmlNode* system, const DetectOptions& options) {
  if (system == nullptr) {
    WARN("detectTopology: system must not be null");
    return ncclInvalidArgument;
  }
  if (system->name.empty()) system->name = "system";
  if (system->name != "system") {
    WARN("detectTopology: the root element is <%s>, not <system>", system->name.c_str());
    return ncclInvalidArgument;
  }
  if (options.sysfsRoot.empty()) {
    WARN("detectTopology: options.sysfsRoot is empty");
    return ncclInvalidArgument;
  }
  if (system->attr("version") == nullptr) system->setAttr("version", "1");

  bool usedHwloc = false;
  if (options.useHwloc) {
    CHORUS_CHECK(addCpusFromHwloc(system, options.sysfsRoot, options.cpuinfoPath, &usedHwloc));
  }
  if (!usedHwloc) {
    CHORUS_CHECK(addCpusFromSysfs(system, options.sysfsRoot, options.cpuinfoPath));
    CHORUS_CHECK(addPciDevicesFromSysfs(system, options.sysfsRoot));
  }
  if (options.useNvml) {
    std::string why;
    const NvmlApi* nvml = nvmlApi(&why);
    if (nvml == nullptr) INFO(kSubsysGraph, "Topology detection: no GPUs from NVML (%s)", why.c_str());
    CHORUS_CHECK(addNvmlGpus(system, options.sysfsRoot, nvml));
  }
  CHORUS_CHECK(addIbNets(system, options.sysfsRoot));
  return ncclSuccess;
}

}  // namespace chorus::topo
