// Topology detection: this machine as NCCL's topology XML tree (<system version="1"> with
// <cpu>, <pci>, <gpu>, <nvlink>, <nic> and <net> elements), the tree NCCL_TOPO_DUMP_FILE
// writes and the search reads. CPUs, NUMA nodes and PCI come from hwloc, or sysfs without
// it; GPUs and NVLinks from NVML; IB/RoCE ports from sysfs. Missing libraries make a
// smaller tree, never an error.
#pragma once

#include <string>

#include "nccl.h"
#include "src/topo/topo_xml.h"

namespace chorus::topo {

struct DetectOptions {
  // Where sysfs is; tests point it at a fake tree (hwloc always reads the live machine,
  // so such tests set useHwloc = false).
  std::string sysfsRoot = "/sys";
  std::string cpuinfoPath = "/proc/cpuinfo";
  bool useHwloc = true;
  bool useNvml = true;
};

// Fills `system`: an empty node becomes <system version="1">; a <system> already holding
// elements (an NCCL_TOPO_FILE) is completed, elements found by numaid, busid and net name.
// ncclInvalidArgument for a null or non-<system> node; ncclSystemError when no CPU can be
// found at all (a WARN names the files read).
ncclResult_t detectTopology(XmlNode* system, const DetectOptions& options = {});

}  // namespace chorus::topo
