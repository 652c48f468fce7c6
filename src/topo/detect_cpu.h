// The CPU side of topology detection: one <cpu> per NUMA node that has CPUs, and under
// each the PCI devices NCCL places (NVIDIA GPUs, NICs, NVSwitches) with the bridges on
// their way to the root complex, in NCCL's topology XML vocabulary:
//
//   <cpu numaid="0" affinity="00000000,0000ffff" arch="x86_64" vendor="GenuineIntel"
//        familyid="6" modelid="85">
//     <pci busid="0000:17:00.0" class="0x060400" vendor="0x1000" device="0xc010"
//          subsystem_vendor="0x1000" subsystem_device="0xa064" link_speed="16.0 GT/s PCIe"
//          link_width="16">
//       <pci busid="0000:18:00.0" class="0x020700" ...><nic/></pci>
//
// hwloc (loaded at run time) is the first source; without it NUMA nodes come from
// <sysfs>/devices/system/node and PCI devices from <sysfs>/bus/pci/devices. Elements are
// found by numaid and busid before they are added, so detection merges into a tree that
// already holds them. A <gpu> child needs NVML's dev and sm (nvml_api.h adds it).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "nccl.h"
#include "src/topo/topo_xml.h"

namespace chorus::topo {

// "0-3,8,10-11" (a kernel cpulist, trailing newline allowed) into CPU numbers, ascending.
// False on text that is not a list; an empty list is valid.
bool parseCpuList(std::string_view text, std::vector<int>* cpus);

// NCCL's affinity text: `words` comma-separated 32-bit hex words, most significant first
// ("0000ffff,ffffffff"); more words when a CPU needs them.
std::string formatAffinity(const std::vector<int>& cpus, int words);

// The NUMA nodes through hwloc, with the PCI tree of hwloc's important I/O objects.
// `*used` says whether hwloc was there to ask (one INFO line when it was not; no error).
ncclResult_t addCpusFromHwloc(XmlNode* system, const std::string& sysfsRoot, const std::string& cpuinfoPath,
                              bool* used);

// The NUMA nodes from <sysfsRoot>/devices/system/node/node*/cpulist, or one <cpu> with
// every CPU of <sysfsRoot>/devices/system/cpu/online when that directory is absent.
// arch from uname, vendor/familyid/modelid from `cpuinfoPath` (x86 fields; absent elsewhere).
ncclResult_t addCpusFromSysfs(XmlNode* system, const std::string& sysfsRoot, const std::string& cpuinfoPath);

// Every NVIDIA GPU, NIC and NVSwitch in <sysfsRoot>/bus/pci/devices, placed as
// ensurePciDevice does; NICs get a <nic> child.
ncclResult_t addPciDevicesFromSysfs(XmlNode* system, const std::string& sysfsRoot);

// A bus id as the tree spells it: lower case, 16-bit domain ("00000000:07:00.0" from NVML
// becomes "0000:07:00.0"). Empty when `busId` is not "[domain:]bus:device.function".
std::string normalizeBusId(std::string_view busId);

// The <pci> element of that bus id anywhere under `node`, or nullptr.
XmlNode* findPciDevice(XmlNode* node, std::string_view busId);

// The <pci> element of `busId`, added when missing with the bridges above it from the
// device's sysfs path (<sysfsRoot>/bus/pci/devices/<busId>), under the <cpu> of its
// numa_node (the first <cpu> when the node is unknown; a <cpu numaid="0"> when there is
// none). A device sysfs does not know is placed alone under that <cpu>, with an INFO line.
ncclResult_t ensurePciDevice(XmlNode* system, const std::string& sysfsRoot, std::string_view busId, XmlNode** pci);

}  // namespace chorus::topo
