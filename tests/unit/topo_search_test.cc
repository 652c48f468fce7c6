// The topology model and ring search on the machine shapes in tests/topo, with every
// expected figure computed by hand from NCCL's bandwidth constants.
#include "src/topo/topo_search.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "src/topo/topo_system.h"
#include "src/topo/topo_xml.h"

namespace chorus::topo {
namespace {

TopoSystem load(const std::string& file) {
  XmlNode xml;
  EXPECT_EQ(loadXmlFile(std::string(CHORUS_TOPO_TEST_DIR) + "/" + file, &xml), ncclSuccess) << file;
  TopoSystem system;
  std::string error;
  EXPECT_EQ(TopoSystem::fromXml(xml, &system, &error), ncclSuccess) << error;
  return system;
}

void expectEveryGpuOnce(const TopoSystem& system, const RingPlan& plan) {
  std::set<int> seen(plan.order.begin(), plan.order.end());
  EXPECT_EQ(plan.order.size(), system.gpus().size());
  EXPECT_EQ(seen, std::set<int>(system.gpus().begin(), system.gpus().end()));
}

// Each GPU's NIC is the one behind its own PCIe switch (mlx5_<dev>), and the ring runs
// on NVLink through NVSwitch: 18 links x 20.6 GB/s (sm 90) = 370.8 GB/s.
TEST(TopoSearchTest, DgxH100RingsOverNvSwitchAndPairsEachGpuWithItsSwitchsNic) {
  const TopoSystem system = load("dgx_h100.xml");
  ASSERT_EQ(system.gpus().size(), 8u);
  ASSERT_EQ(system.nics().size(), 8u);
  EXPECT_FLOAT_EQ(system.interSocketBw(), 22.0f);  // Sapphire Rapids (model 143)
  const RingPlan one = searchRing(system, 1);
  expectEveryGpuOnce(system, one);
  EXPECT_EQ(one.worstHop, PathType::NVL);
  EXPECT_EQ(one.socketCrossings, 0);
  EXPECT_NEAR(one.intraBw, 370.8f, 1e-3);
  EXPECT_NEAR(one.algBw, 370.8f * 8 / 14, 1e-3);
  for (size_t i = 0; i < one.order.size(); ++i) {
    const TopoNode& gpu = system.node(one.order[i]);
    ASSERT_GE(one.nicOfGpu[i], 0);
    EXPECT_EQ(system.node(one.nicOfGpu[i]).netNames.at(0), "mlx5_" + std::to_string(gpu.gpuDev));
    EXPECT_EQ(system.path(one.order[i], one.nicOfGpu[i]).type, PathType::PIX);
  }
  // Two hosts: 8 channels, each NIC at min(400 Gb/s = 50 GB/s, Gen5 x16 = 48 GB/s).
  const RingPlan two = searchRing(system, 2);
  EXPECT_EQ(two.channels, 8);
  EXPECT_NEAR(two.interBw, 8 * 48.0f, 1e-3);
  EXPECT_NEAR(two.busBw, 370.8f, 1e-3);
  EXPECT_NEAR(two.algBw, 370.8f * 16 / 30, 1e-3);
}

// Four GPUs on their own Gen4 x16 root ports of one CPU: every hop goes through the CPU
// (PHB) at 24 GB/s; the one NIC (100 Gb/s = 12.5 GB/s) limits two hosts.
TEST(TopoSearchTest, PcieWorkstationRingsThroughTheHostBridge) {
  const TopoSystem system = load("pcie_4gpu_workstation.xml");
  const RingPlan one = searchRing(system, 1);
  expectEveryGpuOnce(system, one);
  EXPECT_EQ(one.worstHop, PathType::PHB);
  EXPECT_EQ(one.socketCrossings, 0);
  EXPECT_NEAR(one.busBw, 24.0f, 1e-4);
  EXPECT_NEAR(one.algBw, 24.0f * 4 / 6, 1e-4);
  const RingPlan two = searchRing(system, 2);
  EXPECT_EQ(two.channels, 1);
  EXPECT_NEAR(two.busBw, 12.5f, 1e-4);
  EXPECT_NEAR(two.algBw, 12.5f * 8 / 14, 1e-4);
}

// Two sockets (Ice Lake: 10 GB/s between them), each with a PCIe switch holding two GPUs
// and a NIC. The ring keeps switch-mates together, so only the socket changes cross.
TEST(TopoSearchTest, TwoSocketHostsCrossTheSocketLinkOnlyWhereTheRingMust) {
  const TopoSystem system = load("two_host_cluster/host0.xml");
  ASSERT_EQ(system.gpus().size(), 4u);
  EXPECT_FLOAT_EQ(system.interSocketBw(), 10.0f);
  const RingPlan one = searchRing(system, 1);
  expectEveryGpuOnce(system, one);
  EXPECT_EQ(one.socketCrossings, 2);  // out to socket 1 and back: fewer is impossible
  EXPECT_EQ(one.worstHop, PathType::SYS);
  EXPECT_NEAR(one.intraBw, 10.0f, 1e-4);
  for (size_t i = 0; i + 1 < one.order.size(); ++i) {
    const bool sameSocket = system.node(one.order[i]).cpu == system.node(one.order[i + 1]).cpu;
    EXPECT_EQ(system.path(one.order[i], one.order[i + 1]).type, sameSocket ? PathType::PIX : PathType::SYS);
  }
  for (size_t i = 0; i < one.order.size(); ++i) {
    EXPECT_EQ(system.node(one.nicOfGpu[i]).cpu, system.node(one.order[i]).cpu) << "a GPU paired with the far NIC";
  }
  const RingPlan two = searchRing(system, 2);
  EXPECT_EQ(two.socketCrossings, 1);  // a host's chain crosses once
  EXPECT_EQ(two.channels, 2);
  EXPECT_NEAR(two.interBw, 25.0f, 1e-4);  // 2 x 12.5 GB/s
  EXPECT_NEAR(two.busBw, 10.0f, 1e-4);
}

// Trees: a host's chain in ring order; across hosts the chain head's NIC carries the tree.
TEST(TopoSearchTest, TreesChainTheHostAndLeaveThroughTheHeadsNic) {
  const TopoSystem dgx = load("dgx_h100.xml");
  const TreePlan oneHost = searchTree(dgx, 1);
  EXPECT_EQ(oneHost.chain, searchRing(dgx, 1).order);
  EXPECT_NEAR(oneHost.algBw, 370.8f, 1e-3);
  const TreePlan twoHosts = searchTree(dgx, 2);
  EXPECT_NEAR(twoHosts.interBw, 48.0f, 1e-4);  // GPU 0 -> mlx5_0 over Gen5 x16
  EXPECT_NEAR(twoHosts.algBw, 48.0f, 1e-4);
  EXPECT_NEAR(twoHosts.busBw, 48.0f * 2 * 15 / 16, 1e-3);
  const TopoSystem host = load("two_host_cluster/host0.xml");
  const TreePlan chain = searchTree(host, 1);
  EXPECT_NEAR(chain.intraBw, 10.0f, 1e-4);  // the chain still crosses the sockets once
  EXPECT_NEAR(chain.algBw, 10.0f, 1e-4);
}

// NCCL_GRAPH_DUMP_FILE's XML: a tree graph and a ring graph whose channels each list every
// GPU once, framed across hosts by the NICs they enter and leave through.
TEST(TopoSearchTest, GraphsXmlListsEveryChannel) {
  const TopoSystem dgx = load("dgx_h100.xml");
  const RingPlan ring = searchRing(dgx, 2);
  const XmlNode graphs = graphsXml(dgx, ring, searchTree(dgx, 2), 2);
  ASSERT_EQ(graphs.name, "graphs");
  const std::vector<const XmlNode*> list = graphs.childrenNamed("graph");
  ASSERT_EQ(list.size(), 2u);
  ASSERT_TRUE(list[0]->attr("pattern") && list[1]->attr("pattern") && list[1]->attr("nchannels"));
  EXPECT_EQ(*list[0]->attr("pattern"), "3");
  EXPECT_EQ(*list[1]->attr("pattern"), "4");
  EXPECT_EQ(*list[1]->attr("nchannels"), "8");
  const std::vector<const XmlNode*> channels = list[1]->childrenNamed("channel");
  ASSERT_EQ(channels.size(), 8u);
  for (size_t c = 0; c < channels.size(); ++c) {
    std::set<std::string> gpus;
    for (const XmlNode* gpu : channels[c]->childrenNamed("gpu")) {
      ASSERT_NE(gpu->attr("dev"), nullptr);
      gpus.insert(*gpu->attr("dev"));
    }
    EXPECT_EQ(gpus.size(), 8u);
    const std::vector<const XmlNode*> nets = channels[c]->childrenNamed("net");
    ASSERT_EQ(nets.size(), 2u);
    ASSERT_NE(nets[0]->attr("dev"), nullptr);
    EXPECT_EQ(*nets[0]->attr("dev"), "mlx5_" + std::to_string(c));  // enters next to its first GPU
  }
  std::string error;
  XmlNode back;
  ASSERT_EQ(parseXml(writeXml(graphs), &back, &error), ncclSuccess) << error;
  EXPECT_EQ(back.childrenNamed("graph").size(), 2u);
}

// A DGX-1-like hybrid cube mesh: each V100 has NVLinks to 4 of the 7 others (its quad and
// its twin in the other quad), GPUs 0-3 on socket 0 and 4-7 on socket 1. Document order
// (0..7) would hop 3 -> 4 and 7 -> 0 over PCIe across the sockets; the search finds a
// ring on NVLink alone (e.g. 0 1 5 4 6 7 3 2), at one link's 20 GB/s (sm 70).
TEST(TopoSearchTest, HybridCubeMeshRingStaysOnNvLink) {
  const int links[8][4] = {{1, 2, 3, 4}, {0, 2, 3, 5}, {0, 1, 3, 6}, {0, 1, 2, 7},
                           {0, 5, 6, 7}, {1, 4, 6, 7}, {2, 4, 5, 7}, {3, 4, 5, 6}};
  auto busId = [](int gpu) { return "0000:" + std::to_string(10 + gpu) + ":00.0"; };
  std::string text = "<system version=\"1\">\n";
  for (int socket = 0; socket < 2; ++socket) {
    text += "<cpu numaid=\"" + std::to_string(socket) +
            "\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"79\">\n";
    for (int g = 4 * socket; g < 4 * socket + 4; ++g) {
      text += "<pci busid=\"" + busId(g) + "\" link_speed=\"8.0 GT/s PCIe\" link_width=\"16\">\n<gpu dev=\"" +
              std::to_string(g) + "\" sm=\"70\">\n";
      for (int peer : links[g]) text += "<nvlink target=\"" + busId(peer) + "\" count=\"1\" tclass=\"0x030200\"/>\n";
      text += "</gpu>\n</pci>\n";
    }
    text += "</cpu>\n";
  }
  text += "</system>\n";
  XmlNode xml;
  std::string error;
  ASSERT_EQ(parseXml(text, &xml, &error), ncclSuccess) << error;
  TopoSystem system;
  ASSERT_EQ(TopoSystem::fromXml(xml, &system, &error), ncclSuccess) << error;
  const RingPlan ring = searchRing(system, 1);
  expectEveryGpuOnce(system, ring);
  EXPECT_EQ(ring.worstHop, PathType::NVL);
  EXPECT_EQ(ring.socketCrossings, 0);
  EXPECT_NEAR(ring.intraBw, 20.0f, 1e-4);
  for (size_t i = 0; i < ring.order.size(); ++i) {
    EXPECT_EQ(system.path(ring.order[i], ring.order[(i + 1) % ring.order.size()]).type, PathType::NVL)
        << "hop " << i << " leaves NVLink";
  }
}

TEST(TopoSystemTest, BandwidthTables) {
  EXPECT_FLOAT_EQ(pciBandwidth("8.0 GT/s PCIe", 16), 12.0f);
  EXPECT_FLOAT_EQ(pciBandwidth("16.0 GT/s PCIe", 16), 24.0f);
  EXPECT_FLOAT_EQ(pciBandwidth("32.0 GT/s PCIe", 16), 48.0f);
  EXPECT_FLOAT_EQ(pciBandwidth("16.0 GT/s PCIe", 8), 12.0f);
  EXPECT_FLOAT_EQ(nvlinkBandwidthPerLink(90), 20.6f);
  EXPECT_FLOAT_EQ(nvlinkBandwidthPerLink(86), 12.0f);
  EXPECT_FLOAT_EQ(interSocketBandwidth("x86_64", "AuthenticAMD", 25, 8), 16.0f);
}

TEST(TopoSystemTest, ElementsItCannotPlaceAreErrorsNamingThem) {
  XmlNode xml;
  std::string error;
  ASSERT_EQ(parseXml("<system version=\"1\">\n <cpu numaid=\"0\">\n  <pci busid=\"0000:01:00.0\">\n"
                     "   <gpu sm=\"90\"/>\n  </pci>\n </cpu>\n</system>\n",
                     &xml, &error),
            ncclSuccess)
      << error;
  TopoSystem system;
  EXPECT_EQ(TopoSystem::fromXml(xml, &system, &error), ncclInvalidUsage);
  EXPECT_NE(error.find("line 4: <gpu>: missing attribute 'dev'"), std::string::npos) << error;
  ASSERT_EQ(parseXml("<topology/>", &xml, &error), ncclSuccess);
  EXPECT_EQ(TopoSystem::fromXml(xml, &system, &error), ncclInvalidUsage);
  EXPECT_NE(error.find("<topology>"), std::string::npos) << error;
}

}  // namespace
}  // namespace chorus::topo

namespace chorus::topo {
namespace {

TopoSystem parsed(const std::string& text) {
  XmlNode xml;
  std::string error;
  EXPECT_EQ(parseXml(text, &xml, &error), ncclSuccess) << error;
  TopoSystem system;
  EXPECT_EQ(TopoSystem::fromXml(xml, &system, &error), ncclSuccess) << error;
  return system;
}

// Virtual machines report link_width="0" under a real link speed (seen in a cloud
// provider's published H100 topology file); NCCL reads the width 0 as x16, so a Gen5 GPU
// to NIC path is 48 GB/s, not the 12 GB/s of an unknown link.
TEST(TopoSystemTest, LinkWidthZeroIsReadAsSixteenLanes) {
  const TopoSystem system = parsed(
      "<system version=\"1\"><cpu numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" "
      "modelid=\"143\">\n"
      "<pci busid=\"0000:10:00.0\" class=\"0x060400\" link_speed=\"32.0 GT/s PCIe\" link_width=\"0\">\n"
      " <pci busid=\"0000:11:00.0\" class=\"0x030200\" link_speed=\"32.0 GT/s PCIe\" link_width=\"0\">\n"
      "  <gpu dev=\"0\" sm=\"90\"/></pci>\n"
      " <pci busid=\"0000:12:00.0\" class=\"0x020000\" link_speed=\"32.0 GT/s PCIe\" link_width=\"0\">\n"
      "  <nic><net name=\"mlx5_0\" dev=\"0\" speed=\"200000\" port=\"1\" gdr=\"1\"/></nic></pci>\n"
      "</pci></cpu></system>\n");
  ASSERT_EQ(system.gpus().size(), 1u);
  ASSERT_EQ(system.nics().size(), 1u);
  const TopoPath p = system.path(system.gpus()[0], system.nics()[0]);
  EXPECT_EQ(p.type, PathType::PIX);
  EXPECT_FLOAT_EQ(p.bw, 48.0f);
}

// Two GPUs and two NICs behind one switch (the shape of an 8 x A100 cloud VM): the GPUs
// leave through one NIC each, in document order, as NCCL spreads them; not both through
// the first.
TEST(TopoSystemTest, GpusSharingEquallyNearNicsTakeOneEach) {
  std::string text =
      "<system version=\"1\"><cpu numaid=\"0\" arch=\"x86_64\" vendor=\"AuthenticAMD\" familyid=\"23\" "
      "modelid=\"49\">\n<pci busid=\"0000:20:00.0\" class=\"0x060400\" link_speed=\"16.0 GT/s PCIe\" "
      "link_width=\"16\">\n";
  for (int g = 0; g < 2; ++g)
    text += " <pci busid=\"0000:2" + std::to_string(1 + g) +
            ":00.0\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\"><gpu dev=\"" +
            std::to_string(g) + "\" sm=\"80\"/></pci>\n";
  for (int n = 0; n < 2; ++n)
    text += " <pci busid=\"0000:2" + std::to_string(3 + n) +
            ":00.0\" class=\"0x020700\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\"><nic><net name=\"mlx5_" +
            std::to_string(n) + "\" dev=\"" + std::to_string(n) + "\" speed=\"200000\" port=\"1\"/></nic></pci>\n";
  text += "</pci></cpu></system>\n";
  const TopoSystem system = parsed(text);
  ASSERT_EQ(system.gpus().size(), 2u);
  ASSERT_EQ(system.nics().size(), 2u);
  EXPECT_EQ(system.nearestNics(system.gpus()[0]).size(), 2u) << "both NICs are as near";
  EXPECT_EQ(system.nearestNic(system.gpus()[0]), system.nics()[0]);
  EXPECT_EQ(system.nearestNic(system.gpus()[1]), system.nics()[1]);
}

}  // namespace
}  // namespace chorus::topo
