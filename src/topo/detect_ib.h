// InfiniBand and RoCE ports from sysfs, as <net> elements under their PCI device's <nic>:
//
//   <pci busid="0000:03:00.0" ...><nic>
//     <net name="mlx5_0" dev="0" speed="400000" port="1" guid="0x248a070300b41234"
//          link_layer="InfiniBand"/>
//   </nic></pci>
//
// Reads <sysfsRoot>/class/infiniband/<device>/{node_guid,device,ports/<p>/{state,rate,link_layer}};
// the root is a parameter so tests describe a machine in a temporary directory. Only ACTIVE
// ports become <net>s, numbered (dev) in device then port order, as the IB net lists them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "nccl.h"
#include "src/topo/topo_xml.h"

namespace chorus::topo {

struct IbPort {
  std::string device;     // "mlx5_0"
  int port = 0;           // 1-based, as sysfs names it
  bool active = false;    // state "4: ACTIVE"
  int speedMbps = 0;      // from rate; 0 when unreadable
  std::string linkLayer;  // "InfiniBand" or "Ethernet" (RoCE)
  std::string guid;       // node_guid as one hex number, "0x248a070300b41234"; "" when absent
  std::string busId;      // the PCI device behind device/, normalized; "" when not PCI
};

// "400 Gb/sec (4X NDR)" -> 400000 (Mb/s); 0 when the text does not start with a rate.
int ibRateToMbps(std::string_view rate);

// Every port of every device under <sysfsRoot>/class/infiniband, active or not, devices in
// natural name order (mlx5_2 before mlx5_10), ports ascending. Empty without the directory.
std::vector<IbPort> readIbPorts(const std::string& sysfsRoot);

// Adds one <net> per active port under its PCI device's <nic> (the device and the bridges
// above it are added from sysfs when the tree lacks them; a device with no PCI parent gets
// a <nic> under the first <cpu>). An existing <net> of the same name and port is updated.
ncclResult_t addIbNets(XmlNode* system, const std::string& sysfsRoot);

}  // namespace chorus::topo
