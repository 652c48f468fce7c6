// Topology detection into NCCL's XML tree: this machine through hwloc and through sysfs (they
// must agree); fake sysfs trees for what it lacks (NUMA nodes, IB and RoCE ports); NVML's
// absence through the real loader, GPUs and NVLinks through a fake NVML function table.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/debug.h"
#include "src/topo/detect.h"
#include "src/topo/detect_cpu.h"
#include "src/topo/detect_ib.h"
#include "src/topo/hwloc_api.h"
#include "src/topo/nvml_api.h"

namespace chorus::topo {
namespace {

namespace fs = std::filesystem;

// A directory removed with everything in it when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "chorus-topo-XXXXXX").string();
    path_ = mkdtemp(pattern.data()) != nullptr ? pattern : "";
  }
  ~TempDir() {
    std::error_code error;
    if (!path_.empty()) fs::remove_all(path_, error);
  }
  const std::string& path() const { return path_; }

  void write(const std::string& relative, const std::string& text) const {
    fs::create_directories(fs::path(path_ + "/" + relative).parent_path());
    std::ofstream(path_ + "/" + relative) << text;
  }
  void link(const std::string& relative, const std::string& target) const {
    fs::create_directories(fs::path(path_ + "/" + relative).parent_path());
    fs::create_symlink(target, path_ + "/" + relative);
  }

 private:
  std::string path_;
};

// The test's own readers, so a bug in the library's parsers cannot hide behind them.
std::set<int> cpusOfList(const std::string& list) {
  std::set<int> cpus;
  std::stringstream text(list);
  std::string range;
  while (std::getline(text, range, ',')) {
    size_t dash = range.find('-');
    int first = std::stoi(range.substr(0, dash));
    int last = dash == std::string::npos ? first : std::stoi(range.substr(dash + 1));
    for (int cpu = first; cpu <= last; ++cpu) cpus.insert(cpu);
  }
  return cpus;
}

std::set<int> cpusOfAffinity(const std::string& affinity) {
  std::vector<uint32_t> words;
  std::stringstream text(affinity);
  std::string word;
  while (std::getline(text, word, ',')) words.insert(words.begin(), std::stoul(word, nullptr, 16));
  std::set<int> cpus;
  for (size_t w = 0; w < words.size(); ++w)
    for (int bit = 0; bit < 32; ++bit)
      if (words[w] >> bit & 1) cpus.insert(static_cast<int>(w * 32 + bit));
  return cpus;
}

std::string firstLine(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

void collect(const XmlNode& node, const std::string& name, std::vector<const XmlNode*>* out) {
  for (const XmlNode& child : node.children) {
    if (child.name == name) out->push_back(&child);
    collect(child, name, out);
  }
}

std::vector<const XmlNode*> allNamed(const XmlNode& root, const std::string& name) {
  std::vector<const XmlNode*> out;
  collect(root, name, &out);
  return out;
}

std::string attrOf(const XmlNode* node, const char* key) {
  const std::string* value = node != nullptr ? node->attr(key) : nullptr;
  return value != nullptr ? *value : "<none>";
}

// numaid -> affinity of every <cpu>.
std::map<std::string, std::string> cpuAffinities(const XmlNode& system) {
  std::map<std::string, std::string> out;
  for (const XmlNode* cpu : system.childrenNamed("cpu")) out[attrOf(cpu, "numaid")] = attrOf(cpu, "affinity");
  return out;
}

std::set<std::string> nicBusIds(const XmlNode& system) {
  std::set<std::string> out;
  for (const XmlNode* pci : allNamed(system, "pci"))
    if (pci->child("nic") != nullptr) out.insert(attrOf(pci, "busid"));
  return out;
}

TEST(TopoDetectParsers, CpuListsExpandRangesAndRejectGarbage) {
  std::vector<int> cpus;
  ASSERT_TRUE(parseCpuList("0-3,8,10-11\n", &cpus));
  EXPECT_EQ(cpus, (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  ASSERT_TRUE(parseCpuList("", &cpus));
  EXPECT_TRUE(cpus.empty());
  EXPECT_FALSE(parseCpuList("3-1", &cpus));
  EXPECT_FALSE(parseCpuList("0,,2", &cpus));
  EXPECT_FALSE(parseCpuList("zero", &cpus));
}

TEST(TopoDetectParsers, AffinityIsHexWordsMostSignificantFirst) {
  std::vector<int> cpus;
  for (int cpu = 0; cpu < 48; ++cpu) cpus.push_back(cpu);
  EXPECT_EQ(formatAffinity(cpus, 2), "0000ffff,ffffffff");
  EXPECT_EQ(formatAffinity({0, 1}, 1), "00000003");
  EXPECT_EQ(formatAffinity({0, 1}, 2), "00000000,00000003") << "padded to the words asked for";
  EXPECT_EQ(formatAffinity({33}, 1), "00000002,00000000") << "grows to hold the highest CPU";
}

TEST(TopoDetectParsers, BusIdsAreLowerCaseWithA16BitDomain) {
  EXPECT_EQ(normalizeBusId("00000000:1A:00.0"), "0000:1a:00.0") << "NVML's 32-bit domain";
  EXPECT_EQ(normalizeBusId("0000:c8:00.1"), "0000:c8:00.1");
  EXPECT_EQ(normalizeBusId("19:00.0"), "0000:19:00.0");
  EXPECT_EQ(normalizeBusId("0000:19:00"), "");
  EXPECT_EQ(normalizeBusId("pci0000:00"), "");
  EXPECT_EQ(normalizeBusId("0000:1g:00.0"), "");
}

TEST(TopoDetectParsers, IbRateIsMegabitsPerSecond) {
  EXPECT_EQ(ibRateToMbps("400 Gb/sec (4X NDR)"), 400000);
  EXPECT_EQ(ibRateToMbps("100 Gb/sec (4X EDR)"), 100000);
  EXPECT_EQ(ibRateToMbps("2.5 Gb/sec (1X SDR)"), 2500);
  EXPECT_EQ(ibRateToMbps(""), 0);
  EXPECT_EQ(ibRateToMbps("fast"), 0);
}

TEST(TopoDetectArguments, NullOrForeignRootIsRefusedWithAWarning) {
  EXPECT_EQ(detectTopology(nullptr), ncclInvalidArgument);
  XmlNode other;
  other.name = "graphs";
  EXPECT_EQ(detectTopology(&other), ncclInvalidArgument);
  EXPECT_NE(std::string(lastErrorText()).find("<graphs>"), std::string::npos) << lastErrorText();
  XmlNode system;
  XmlNode* pci = nullptr;
  EXPECT_EQ(ensurePciDevice(&system, "/sys", "zz:00", &pci), ncclInvalidArgument);
  EXPECT_NE(std::string(lastErrorText()).find("'zz:00'"), std::string::npos) << lastErrorText();
  EXPECT_EQ(addIbNets(nullptr, "/sys"), ncclInvalidArgument);
  EXPECT_EQ(addNvmlGpus(nullptr, "/sys", nullptr), ncclInvalidArgument);
}

TEST(TopoDetectThisMachine, OneCpuPerNumaNodeCoveringTheOnlineCpus) {
  XmlNode system;
  ASSERT_EQ(detectTopology(&system), ncclSuccess);
  EXPECT_EQ(system.name, "system");
  EXPECT_EQ(attrOf(&system, "version"), "1");

  size_t nodesWithCpus = 0;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator("/sys/devices/system/node", error)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("node") && name.size() > 4 && isdigit(name[4]) &&
        !firstLine(entry.path().string() + "/cpulist").empty()) {
      ++nodesWithCpus;
    }
  }
  const auto cpus = system.childrenNamed("cpu");
  EXPECT_EQ(cpus.size(), std::max<size_t>(nodesWithCpus, 1));
  std::set<int> covered;
  for (const XmlNode* cpu : cpus) {
    for (int c : cpusOfAffinity(attrOf(cpu, "affinity")))
      EXPECT_TRUE(covered.insert(c).second) << "CPU " << c << " twice";
    EXPECT_NE(attrOf(cpu, "arch"), "<none>");
  }
  EXPECT_EQ(covered, cpusOfList(firstLine("/sys/devices/system/cpu/online")));
}

TEST(TopoDetectThisMachine, SysfsFallbackAgreesWithHwloc) {
  XmlNode viaHwloc, viaSysfs;
  bool used = false;
  ASSERT_EQ(addCpusFromHwloc(&viaHwloc, "/sys", "/proc/cpuinfo", &used), ncclSuccess);
  if (!used) GTEST_SKIP() << "hwloc (" << kHwlocLibrary << ") is not installed";
  ASSERT_EQ(addCpusFromSysfs(&viaSysfs, "/sys", "/proc/cpuinfo"), ncclSuccess);
  EXPECT_EQ(cpuAffinities(viaHwloc), cpuAffinities(viaSysfs));
  const XmlNode* a = viaHwloc.child("cpu");
  const XmlNode* b = viaSysfs.child("cpu");
  for (const char* key : {"arch", "vendor", "familyid", "modelid"}) EXPECT_EQ(attrOf(a, key), attrOf(b, key)) << key;
}

TEST(TopoDetectThisMachine, EveryNicIsPlacedByHwlocAndBySysfs) {
  std::set<std::string> expected;  // the test's own scan of PCI network controllers
  std::error_code error;
  for (const auto& entry : fs::directory_iterator("/sys/bus/pci/devices", error)) {
    if (firstLine(entry.path().string() + "/class").starts_with("0x02")) expected.insert(entry.path().filename());
  }
  XmlNode viaSysfs;
  ASSERT_EQ(detectTopology(&viaSysfs, {.useHwloc = false, .useNvml = false}), ncclSuccess);
  EXPECT_EQ(nicBusIds(viaSysfs), expected);
  XmlNode viaHwloc;
  bool used = false;
  ASSERT_EQ(addCpusFromHwloc(&viaHwloc, "/sys", "/proc/cpuinfo", &used), ncclSuccess);
  if (!used) GTEST_SKIP() << "hwloc (" << kHwlocLibrary << ") is not installed";
  EXPECT_EQ(nicBusIds(viaHwloc), expected);
}

TEST(TopoDetectThisMachine, NvmlAbsentIsSuccessWithoutGpus) {
  NvmlApi api;
  std::string why;
  EXPECT_FALSE(loadNvmlApi("libchorus-no-such-nvml.so.1", &api, &why));
  EXPECT_NE(why.find("libchorus-no-such-nvml.so.1"), std::string::npos) << why;
  EXPECT_FALSE(loadNvmlApi("libc.so.6", &api, &why));
  EXPECT_NE(why.find("nvmlInit_v2 not found"), std::string::npos) << why;
  EXPECT_EQ(api.init, nullptr) << "a failed load leaves an empty table";

  XmlNode system;
  ASSERT_EQ(detectTopology(&system), ncclSuccess);
  if (nvmlApi(&why) != nullptr) GTEST_SKIP() << "NVML is installed here; the absent case needs a machine without it";
  EXPECT_TRUE(allNamed(system, "gpu").empty());
  EXPECT_TRUE(allNamed(system, "nvlink").empty());
  XmlNode empty;
  EXPECT_EQ(addNvmlGpus(&empty, "/sys", nullptr), ncclSuccess);
  EXPECT_TRUE(empty.children.empty());
}

#if CHORUS_HAVE_HWLOC
TEST(TopoDetectThisMachine, HwlocLoaderNamesWhatIsMissing) {
  HwlocApi api;
  std::string why;
  EXPECT_FALSE(loadHwlocApi("libchorus-no-such-hwloc.so", &api, &why));
  EXPECT_NE(why.find("libchorus-no-such-hwloc.so"), std::string::npos) << why;
  EXPECT_FALSE(loadHwlocApi("libc.so.6", &api, &why));
  EXPECT_NE(why.find("hwloc_get_api_version not found"), std::string::npos) << why;
}
#endif

TEST(TopoDetectFakeSysfs, OneCpuPerNumaNodeWithCpus) {
  TempDir root;
  root.write("devices/system/node/node0/cpulist", "0-3\n");
  root.write("devices/system/node/node1/cpulist", "4-7\n");
  root.write("devices/system/node/node2/cpulist", "\n");  // memory only
  root.write("devices/system/node/possible", "0-2\n");
  root.write("devices/system/cpu/online", "0-7\n");
  root.write("cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\n\n");
  XmlNode system;
  ASSERT_EQ(
      detectTopology(
          &system,
          {.sysfsRoot = root.path(), .cpuinfoPath = root.path() + "/cpuinfo", .useHwloc = false, .useNvml = false}),
      ncclSuccess);
  EXPECT_EQ(cpuAffinities(system), (std::map<std::string, std::string>{{"0", "0000000f"}, {"1", "000000f0"}}));
  const XmlNode* cpu = system.child("cpu");
  EXPECT_EQ(attrOf(cpu, "vendor"), "GenuineIntel");
  EXPECT_EQ(attrOf(cpu, "familyid"), "6");
  EXPECT_EQ(attrOf(cpu, "modelid"), "85");
}

TEST(TopoDetectFakeSysfs, WithoutNodesOneCpuHoldsEveryOnlineCpu) {
  TempDir root;
  root.write("devices/system/cpu/online", "0-2,4\n");
  XmlNode system;
  ASSERT_EQ(addCpusFromSysfs(&system, root.path(), root.path() + "/no-cpuinfo"), ncclSuccess);
  EXPECT_EQ(cpuAffinities(system), (std::map<std::string, std::string>{{"0", "00000017"}}));
  EXPECT_EQ(attrOf(system.child("cpu"), "vendor"), "<none>") << "nothing invented without cpuinfo";
}

TEST(TopoDetectFakeSysfs, NoCpuAnywhereIsASystemError) {
  TempDir root;
  XmlNode system;
  EXPECT_EQ(addCpusFromSysfs(&system, root.path(), "/proc/cpuinfo"), ncclSystemError);
  EXPECT_NE(std::string(lastErrorText()).find("devices/system/cpu/online"), std::string::npos) << lastErrorText();
}

// Two NUMA nodes; mlx5_0 (InfiniBand, NDR) behind a root port on node 0; mlx5_1 (RoCE) on
// node 1 with port 1 ACTIVE and port 2 DOWN.
void writeTwoHcaMachine(const TempDir& root) {
  root.write("devices/system/node/node0/cpulist", "0-3");
  root.write("devices/system/node/node1/cpulist", "4-7");
  struct Pci {
    std::string path, cls, vendor, speed, width, numa;
  };
  const Pci devices[] = {{"pci0000:00/0000:00:02.0", "0x060400", "0x8086", "32.0 GT/s PCIe", "8", "0"},
                         {"pci0000:00/0000:00:02.0/0000:03:00.0", "0x020700", "0x15b3", "16.0 GT/s PCIe", "16", "0"},
                         {"pci0000:80/0000:80:01.0", "0x060400", "0x8086", "16.0 GT/s PCIe", "16", "1"},
                         {"pci0000:80/0000:80:01.0/0000:81:00.0", "0x020000", "0x15b3", "32.0 GT/s PCIe", "16", "1"}};
  for (const Pci& d : devices) {
    const std::string dir = "devices/" + d.path;
    for (const auto& [file, text] : {std::pair<std::string, std::string>{"class", d.cls},
                                     {"vendor", d.vendor},
                                     {"device", "0x1021"},
                                     {"subsystem_vendor", d.vendor},
                                     {"subsystem_device", "0x0023"},
                                     {"max_link_speed", d.speed},
                                     {"max_link_width", d.width},
                                     {"numa_node", d.numa}}) {
      root.write(dir + "/" + file, text + "\n");
    }
    root.link("bus/pci/devices/" + fs::path(d.path).filename().string(), "../../../" + dir);
  }
  root.link("class/infiniband/mlx5_0/device", "../../../devices/pci0000:00/0000:00:02.0/0000:03:00.0");
  root.write("class/infiniband/mlx5_0/node_guid", "248a:0703:00b4:1234\n");
  root.write("class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  root.write("class/infiniband/mlx5_0/ports/1/rate", "400 Gb/sec (4X NDR)\n");
  root.write("class/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand\n");
  root.link("class/infiniband/mlx5_1/device", "../../../devices/pci0000:80/0000:80:01.0/0000:81:00.0");
  root.write("class/infiniband/mlx5_1/node_guid", "0c42:a103:0011:2233\n");
  root.write("class/infiniband/mlx5_1/ports/1/state", "4: ACTIVE\n");
  root.write("class/infiniband/mlx5_1/ports/1/rate", "100 Gb/sec (4X EDR)\n");
  root.write("class/infiniband/mlx5_1/ports/1/link_layer", "Ethernet\n");
  root.write("class/infiniband/mlx5_1/ports/2/state", "1: DOWN\n");
  root.write("class/infiniband/mlx5_1/ports/2/rate", "10 Gb/sec (4X SDR)\n");
  root.write("class/infiniband/mlx5_1/ports/2/link_layer", "Ethernet\n");
}

TEST(TopoDetectFakeSysfs, IbPortsAreReadActiveOrNot) {
  TempDir root;
  writeTwoHcaMachine(root);
  const std::vector<IbPort> ports = readIbPorts(root.path());
  ASSERT_EQ(ports.size(), 3u);
  EXPECT_EQ(ports[0].device, "mlx5_0");
  EXPECT_TRUE(ports[0].active);
  EXPECT_EQ(ports[0].speedMbps, 400000);
  EXPECT_EQ(ports[0].guid, "0x248a070300b41234");
  EXPECT_EQ(ports[0].busId, "0000:03:00.0");
  EXPECT_EQ(ports[1].linkLayer, "Ethernet");
  EXPECT_EQ(ports[2].port, 2);
  EXPECT_FALSE(ports[2].active) << "state 1: DOWN";
}

TEST(TopoDetectFakeSysfs, ActivePortsBecomeNetsUnderTheirPciPath) {
  TempDir root;
  writeTwoHcaMachine(root);
  XmlNode system;
  const DetectOptions options{.sysfsRoot = root.path(), .useHwloc = false, .useNvml = false};
  ASSERT_EQ(detectTopology(&system, options), ncclSuccess);

  ASSERT_EQ(allNamed(system, "net").size(), 2u) << "the DOWN port is left out";
  std::map<std::string, const XmlNode*> cpus;
  for (const XmlNode* cpu : system.childrenNamed("cpu")) cpus[attrOf(cpu, "numaid")] = cpu;
  ASSERT_EQ(cpus.size(), 2u);

  // node 0 > root port 0000:00:02.0 > 0000:03:00.0 > nic > net mlx5_0
  const XmlNode* rootPort = cpus["0"]->child("pci");
  ASSERT_NE(rootPort, nullptr);
  EXPECT_EQ(attrOf(rootPort, "busid"), "0000:00:02.0");
  EXPECT_EQ(attrOf(rootPort, "class"), "0x060400");
  const XmlNode* hca = rootPort->child("pci");
  ASSERT_NE(hca, nullptr);
  EXPECT_EQ(attrOf(hca, "busid"), "0000:03:00.0");
  EXPECT_EQ(attrOf(hca, "vendor"), "0x15b3");
  EXPECT_EQ(attrOf(hca, "link_speed"), "16.0 GT/s PCIe") << "the device's speed, slower than its port's";
  EXPECT_EQ(attrOf(hca, "link_width"), "8") << "the port's width, narrower than the device's";
  ASSERT_NE(hca->child("nic"), nullptr);
  const XmlNode* ib = hca->child("nic")->child("net");
  EXPECT_EQ(attrOf(ib, "name"), "mlx5_0");
  EXPECT_EQ(attrOf(ib, "dev"), "0");
  EXPECT_EQ(attrOf(ib, "speed"), "400000");
  EXPECT_EQ(attrOf(ib, "port"), "1");
  EXPECT_EQ(attrOf(ib, "guid"), "0x248a070300b41234");
  EXPECT_EQ(attrOf(ib, "link_layer"), "InfiniBand");

  // node 1 > 0000:80:01.0 > 0000:81:00.0 > nic > net mlx5_1 (RoCE)
  const XmlNode* roce = findPciDevice(&system, "0000:81:00.0");
  ASSERT_NE(roce, nullptr);
  EXPECT_EQ(findPciDevice(const_cast<XmlNode*>(cpus["1"]), "0000:81:00.0"), roce) << "placed on NUMA node 1";
  const XmlNode* eth = roce->child("nic") != nullptr ? roce->child("nic")->child("net") : nullptr;
  EXPECT_EQ(attrOf(eth, "name"), "mlx5_1");
  EXPECT_EQ(attrOf(eth, "dev"), "1");
  EXPECT_EQ(attrOf(eth, "speed"), "100000");
  EXPECT_EQ(attrOf(eth, "link_layer"), "Ethernet");

  // Detecting again completes the same tree instead of adding to it.
  ASSERT_EQ(detectTopology(&system, options), ncclSuccess);
  EXPECT_EQ(allNamed(system, "net").size(), 2u);
  EXPECT_EQ(allNamed(system, "pci").size(), 4u);
  EXPECT_EQ(system.childrenNamed("cpu").size(), 2u);
}

TEST(TopoDetectFakeSysfs, WithoutIbOrSysfsDevicesOnlyAskedForPciIsPlaced) {
  TempDir root;
  root.write("devices/system/cpu/online", "0-1");
  XmlNode system;
  ASSERT_EQ(detectTopology(&system, {.sysfsRoot = root.path(), .useHwloc = false, .useNvml = false}), ncclSuccess);
  EXPECT_TRUE(allNamed(system, "net").empty());
  EXPECT_TRUE(allNamed(system, "pci").empty());
  XmlNode* pci = nullptr;  // a device sysfs does not know hangs from the first <cpu>
  ASSERT_EQ(ensurePciDevice(&system, root.path(), "00000000:C8:00.0", &pci), ncclSuccess);
  ASSERT_NE(pci, nullptr);
  EXPECT_EQ(attrOf(pci, "busid"), "0000:c8:00.0");
  EXPECT_EQ(system.child("cpu")->child("pci"), pci);
}

// Two H100s (sm 90): GPU 0 at 00000000:07:00.0 with links 0-1 to GPU 1, 2-3 to an NVSwitch
// this machine cannot see, link 4 down and link 5 without P2P (both to GPU 1); GPU 1 at
// 00000000:0F:00.0 with links 0-1 to GPU 0. A third device does not answer.
namespace fake_nvml {
nvml::Device handle(unsigned index) { return reinterpret_cast<nvml::Device>(uintptr_t(index) + 1); }
unsigned indexOf(nvml::Device device) { return static_cast<unsigned>(reinterpret_cast<uintptr_t>(device) - 1); }
void fill(nvml::PciInfo* pci, const char* busId) {
  *pci = {};
  snprintf(pci->busId, sizeof(pci->busId), "%s", busId);
}
const char* remoteOf(unsigned gpu, unsigned link) {
  if (gpu == 0) return link < 2 || link >= 4 ? "00000000:0F:00.0" : "00000000:C8:00.0";
  return "00000000:07:00.0";
}
NvmlApi table() {
  NvmlApi api;
  api.deviceGetCount = [](unsigned* count) { return (*count = 3, nvml::kSuccess); };
  api.deviceGetHandleByIndex = [](unsigned index, nvml::Device* device) {
    return (*device = handle(index), nvml::kSuccess);
  };
  api.deviceGetPciInfo = [](nvml::Device device, nvml::PciInfo* pci) {
    fill(pci, indexOf(device) == 0 ? "00000000:07:00.0" : "00000000:0F:00.0");
    return nvml::kSuccess;
  };
  api.deviceGetCudaComputeCapability = [](nvml::Device device, int* major, int* minor) {
    *major = 9;
    *minor = 0;
    return indexOf(device) < 2 ? nvml::kSuccess : 3;  // NVML_ERROR_NOT_SUPPORTED
  };
  api.deviceGetNvLinkCapability = [](nvml::Device device, unsigned link, nvml::NvLinkCapability, unsigned* p2p) {
    *p2p = !(indexOf(device) == 0 && link == 5);
    return link < 6 ? nvml::kSuccess : 2;  // NVML_ERROR_INVALID_ARGUMENT past the last link
  };
  api.deviceGetNvLinkState = [](nvml::Device device, unsigned link, nvml::EnableState* state) {
    *state = indexOf(device) == 0 && link == 4 ? nvml::kDisabled : nvml::kEnabled;
    return link < (indexOf(device) == 0 ? 6u : 2u) ? nvml::kSuccess : 2;
  };
  api.deviceGetNvLinkRemotePciInfo = [](nvml::Device device, unsigned link, nvml::PciInfo* pci) {
    fill(pci, remoteOf(indexOf(device), link));
    return nvml::kSuccess;
  };
  return api;
}
}  // namespace fake_nvml

TEST(TopoDetectNvml, GpusAndTheirNvLinksFromTheFunctionTable) {
  TempDir root;
  root.write("devices/system/cpu/online", "0-7");
  for (const char* path : {"pci0000:00/0000:00:01.0/0000:07:00.0", "pci0000:00/0000:00:02.0/0000:0f:00.0"}) {
    root.write(std::string("devices/") + path + "/class", "0x030200\n");
    root.write(std::string("devices/") + path + "/vendor", "0x10de\n");
    root.link("bus/pci/devices/" + fs::path(path).filename().string(), std::string("../../../devices/") + path);
  }
  XmlNode system;
  ASSERT_EQ(addCpusFromSysfs(&system, root.path(), "/proc/cpuinfo"), ncclSuccess);
  const NvmlApi api = fake_nvml::table();
  ASSERT_EQ(addNvmlGpus(&system, root.path(), &api), ncclSuccess);

  ASSERT_EQ(allNamed(system, "gpu").size(), 2u) << "the device without a compute capability is skipped";
  const XmlNode* pci0 = findPciDevice(&system, "0000:07:00.0");
  ASSERT_NE(pci0, nullptr);
  EXPECT_EQ(attrOf(system.child("cpu")->child("pci"), "busid"), "0000:00:01.0") << "placed behind its root port";
  const XmlNode* gpu0 = pci0->child("gpu");
  ASSERT_NE(gpu0, nullptr);
  EXPECT_EQ(attrOf(gpu0, "dev"), "0");
  EXPECT_EQ(attrOf(gpu0, "sm"), "90");
  std::map<std::string, std::pair<std::string, std::string>> links;  // target -> count, tclass
  for (const XmlNode* link : gpu0->childrenNamed("nvlink"))
    links[attrOf(link, "target")] = {attrOf(link, "count"), attrOf(link, "tclass")};
  EXPECT_EQ(links, (std::map<std::string, std::pair<std::string, std::string>>{
                       {"0000:0f:00.0", {"2", "0x030200"}},    // down and non-P2P links not counted
                       {"0000:c8:00.0", {"2", "0x068000"}}}))  // not visible here: an NVSwitch
      << "links to GPU 1 and the switch";
  const XmlNode* gpu1 = findPciDevice(&system, "0000:0f:00.0")->child("gpu");
  ASSERT_NE(gpu1, nullptr);
  EXPECT_EQ(attrOf(gpu1, "dev"), "1");
  ASSERT_EQ(gpu1->childrenNamed("nvlink").size(), 1u);
  EXPECT_EQ(attrOf(gpu1->child("nvlink"), "count"), "2");

  // Again: the same GPUs and link counts, not doubled.
  ASSERT_EQ(addNvmlGpus(&system, root.path(), &api), ncclSuccess);
  EXPECT_EQ(allNamed(system, "gpu").size(), 2u);
  EXPECT_EQ(attrOf(findPciDevice(&system, "0000:0f:00.0")->child("gpu")->child("nvlink"), "count"), "2");
}

}  // namespace
}  // namespace chorus::topo
