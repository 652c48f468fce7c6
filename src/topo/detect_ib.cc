#include "src/topo/detect_ib.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/debug.h"
#include "src/topo/detect_cpu.h"

namespace chorus::topo {

namespace {

bool readLine(const std::filesystem::path& path, std::string* out) {
  std::ifstream file(path);
  if (!file || !std::getline(file, *out)) return false;
  while (!out->empty() && isspace(static_cast<unsigned char>(out->back()))) out->pop_back();
  return true;
}

// Names with a common prefix sort by their number: mlx5_2 before mlx5_10.
bool naturalLess(const std::string& a, const std::string& b) {
  return a.size() != b.size() ? a.size() < b.size() : a < b;
}

std::string guidText(std::string nodeGuid) {
  std::erase(nodeGuid, ':');
  if (nodeGuid.empty() || !std::all_of(nodeGuid.begin(), nodeGuid.end(), [](char c) { return isxdigit(c); })) {
    return "";
  }
  return "0x" + nodeGuid;
}

// The bus id of the PCI device `device/` points to; "" for a device that is not PCI.
std::string deviceBusId(const std::filesystem::path& deviceDir) {
  std::error_code error;
  std::filesystem::path target = std::filesystem::canonical(deviceDir / "device", error);
  if (error) return "";
  const std::string name = target.filename().string();
  std::string busId = normalizeBusId(name);
  return busId == name ? busId : "";
}

XmlNode* findNet(XmlNode* nic, const IbPort& port) {
  for (XmlNode& net : nic->children) {
    const std::string* name = net.name == "net" ? net.attr("name") : nullptr;
    const std::string* number = net.name == "net" ? net.attr("port") : nullptr;
    if (name != nullptr && number != nullptr && *name == port.device && *number == std::to_string(port.port)) {
      return &net;
    }
  }
  return nullptr;
}

// The <nic> the port's <net> goes in.
ncclResult_t nicFor(XmlNode* system, const std::string& sysfsRoot, const IbPort& port, XmlNode** nic) {
  XmlNode* parent = nullptr;
  if (!port.busId.empty()) {
    CHORUS_CHECK(ensurePciDevice(system, sysfsRoot, port.busId, &parent));
  } else {
    INFO(kSubsysGraph, "Topology detection: %s has no PCI device; its NIC hangs from the first CPU",
         port.device.c_str());
    parent = system->child("cpu");
    if (parent == nullptr) {
      parent = &system->addChild("cpu");
      parent->setAttr("numaid", "0");
    }
  }
  *nic = parent->child("nic");
  if (*nic == nullptr) *nic = &parent->addChild("nic");
  return ncclSuccess;
}

}  // namespace

int ibRateToMbps(std::string_view rate) {
  std::string text(rate);
  char* rest = nullptr;
  double gbps = strtod(text.c_str(), &rest);
  if (rest == text.c_str() || gbps <= 0 || gbps > 1e6) return 0;
  return static_cast<int>(gbps * 1000 + 0.5);  // 2.5 Gb/sec (1X SDR) is 2500
}

std::vector<IbPort> readIbPorts(const std::string& sysfsRoot) {
  std::vector<IbPort> ports;
  std::error_code error;
  std::vector<std::string> devices;
  for (const auto& entry : std::filesystem::directory_iterator(sysfsRoot + "/class/infiniband", error)) {
    devices.push_back(entry.path().filename().string());
  }
  std::sort(devices.begin(), devices.end(), naturalLess);
  for (const std::string& device : devices) {
    const std::filesystem::path deviceDir = std::filesystem::path(sysfsRoot) / "class/infiniband" / device;
    std::string nodeGuid;
    readLine(deviceDir / "node_guid", &nodeGuid);
    const std::string busId = deviceBusId(deviceDir);
    std::vector<int> numbers;
    for (const auto& entry : std::filesystem::directory_iterator(deviceDir / "ports", error)) {
      int number = atoi(entry.path().filename().c_str());
      if (number > 0) numbers.push_back(number);
    }
    std::sort(numbers.begin(), numbers.end());
    for (int number : numbers) {
      const std::filesystem::path portDir = deviceDir / "ports" / std::to_string(number);
      IbPort port{device, number, false, 0, "", guidText(nodeGuid), busId};
      std::string state, rate;
      if (readLine(portDir / "state", &state)) port.active = state.find("ACTIVE") != std::string::npos;
      if (readLine(portDir / "rate", &rate)) port.speedMbps = ibRateToMbps(rate);
      readLine(portDir / "link_layer", &port.linkLayer);
      ports.push_back(std::move(port));
    }
  }
  return ports;
}

ncclResult_t addIbNets(XmlNode* system, const std::string& sysfsRoot) {
  if (system == nullptr) {
    WARN("addIbNets: system must not be null");
    return ncclInvalidArgument;
  }
  int dev = 0;
  for (const IbPort& port : readIbPorts(sysfsRoot)) {
    if (!port.active) {
      INFO(kSubsysGraph, "Topology detection: %s port %d is not ACTIVE; skipped", port.device.c_str(), port.port);
      continue;
    }
    XmlNode* nic = nullptr;
    CHORUS_CHECK(nicFor(system, sysfsRoot, port, &nic));
    XmlNode* net = findNet(nic, port);
    if (net == nullptr) net = &nic->addChild("net");
    net->setAttr("name", port.device);
    net->setAttr("dev", std::to_string(dev++));
    net->setAttr("speed", std::to_string(port.speedMbps));
    net->setAttr("port", std::to_string(port.port));
    if (!port.guid.empty()) net->setAttr("guid", port.guid);
    if (!port.linkLayer.empty()) net->setAttr("link_layer", port.linkLayer);
  }
  return ncclSuccess;
}

}  // namespace chorus::topo
