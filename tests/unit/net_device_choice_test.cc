// netDeviceFor (transport/transport.h): a GPU communicator's network connections leave
// through the NIC nearest its GPU when the net has it; otherwise connections are dealt over
// the net's devices by peer rank. And netBuffersOnGpu: where each end of such a connection
// keeps its slots (GPUDirect RDMA).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/path_type.h"
#include "stand_in_gpu_memory.h"
#include "transport/net/net.h"
#include "transport/transport.h"

namespace chorus {
namespace {

TEST(NetDeviceChoice, TheNearestNicTheNetHasWins) {
  const std::vector<std::string> ib = {"mlx5_0:1", "mlx5_1:1", "mlx5_2:1"};
  const std::vector<std::string> near = {"mlx5_1"};
  for (int peer = 0; peer < 6; ++peer) EXPECT_EQ(netDeviceFor(ib, &near, peer), 1) << "peer " << peer;
  const std::vector<std::string> firstMissing = {"mlx5_9", "mlx5_2"};
  EXPECT_EQ(netDeviceFor(ib, &firstMissing, 0), 2) << "the next nearest the net has";
  const std::vector<std::string> named = {"eth0", "eth1"};
  const std::vector<std::string> nearEth = {"eth1"};
  EXPECT_EQ(netDeviceFor(named, &nearEth, 0), 1) << "a device named exactly as the NIC";
  const std::vector<std::string> prefixOnly = {"mlx5_1"};
  EXPECT_EQ(netDeviceFor({"mlx5_10:1", "mlx5_1:1"}, &prefixOnly, 0), 1) << "mlx5_10 is not mlx5_1";
  int index = -2;
  EXPECT_EQ(netDeviceFor(ib, &firstMissing, 0, &index), 2);
  EXPECT_EQ(index, 1) << "which of the near NICs it was";
  EXPECT_EQ(netDeviceFor(named, &near, 1, &index), 1);
  EXPECT_EQ(index, -1) << "none of them";
}

TEST(NetBuffersOnGpu, TheNetTheGdrLevelAndGdrReadDecide) {
  fixtures::StandInGpuMemory memory;
  PeerInfo self{};
  self.gpuComm = 1;
  LinkContext link;
  link.gpuMemory = &memory;
  const int cuda = kNetPtrHost | kNetPtrCuda;
  const int pxb = static_cast<int>(PathType::PXB);
  std::string why;
  EXPECT_TRUE(netBuffersOnGpu(self, link, cuda, pxb, false, &why)) << why;
  EXPECT_FALSE(netBuffersOnGpu(self, link, kNetPtrHost, pxb, false, &why));
  EXPECT_NE(why.find("cannot reach GPU memory"), std::string::npos) << why;
  EXPECT_FALSE(netBuffersOnGpu(self, link, cuda, static_cast<int>(PathType::PHB), false, &why)) << "beyond PXB";
  EXPECT_NE(why.find("is PHB, NCCL_NET_GDR_LEVEL is PXB"), std::string::npos) << why;
  EXPECT_FALSE(netBuffersOnGpu(self, link, cuda, -1, false, &why)) << "a path not known";
  setenv("NCCL_NET_GDR_LEVEL", "SYS", 1);
  EXPECT_TRUE(netBuffersOnGpu(self, link, cuda, static_cast<int>(PathType::SYS), false, &why)) << why;
  unsetenv("NCCL_NET_GDR_LEVEL");
  // Reads (the sending end): by default only where the GPU's ring is NVLink.
  EXPECT_FALSE(netBuffersOnGpu(self, link, cuda, pxb, true, &why));
  EXPECT_NE(why.find("NCCL_NET_GDR_READ"), std::string::npos) << why;
  self.ringOverNvlink = 1;
  EXPECT_TRUE(netBuffersOnGpu(self, link, cuda, pxb, true, &why)) << why;
  setenv("NCCL_NET_GDR_READ", "0", 1);
  EXPECT_FALSE(netBuffersOnGpu(self, link, cuda, pxb, true, &why));
  EXPECT_TRUE(netBuffersOnGpu(self, link, cuda, pxb, false, &why)) << "writes stay";
  unsetenv("NCCL_NET_GDR_READ");
  // A CPU communicator never.
  self.gpuComm = 0;
  EXPECT_FALSE(netBuffersOnGpu(self, link, cuda, pxb, false, &why));
}

TEST(NetDeviceChoice, WithoutANearNicTheNetHasConnectionsAreDealtByPeer) {
  const std::vector<std::string> eth = {"eth0", "eth1", "eth2"};
  const std::vector<std::string> near = {"mlx5_0"};
  for (int peer = 0; peer < 6; ++peer) {
    EXPECT_EQ(netDeviceFor(eth, &near, peer), peer % 3);
    EXPECT_EQ(netDeviceFor(eth, nullptr, peer), peer % 3);
  }
  EXPECT_EQ(netDeviceFor({}, nullptr, 5), 0) << "a net that lists no device: device 0";
}

}  // namespace
}  // namespace chorus
