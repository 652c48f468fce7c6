// netDeviceFor (transport/transport.h): a GPU communicator's network connections leave
// through the NIC nearest its GPU when the net has it; otherwise connections are dealt over
// the net's devices by peer rank.
#include <gtest/gtest.h>

#include <string>
#include <vector>

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
