// ncclConfig_t's network fields: trafficClass reaches the network (the socket net's
// connections of that communicator send with it, IP_TOS / IPV6_TCLASS, and no other
// communicator's do), and netName picks the net of that communicator.
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "harness/links.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "harness/socket_count.h"
#include "nccl.h"

namespace chorus_test {
namespace {

// Two ranks as threads over the socket net; returns the sockets carrying `trafficClass`
// while the communicators are alive (after an AllReduce connected them).
int runAndCount(int configTrafficClass, int trafficClass, const char* netName = nullptr) {
  std::vector<ncclComm_t> comms(2, nullptr);
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return -1;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  if (configTrafficClass >= 0) config.trafficClass = configTrafficClass;
  config.netName = netName;
  if (ncclGroupStart() != ncclSuccess) return -1;
  for (int r = 0; r < 2; ++r) ncclCommInitRankConfig(&comms[r], 2, id, r, &config);
  if (ncclGroupEnd() != ncclSuccess) return -1;
  std::vector<std::vector<int32_t>> data(2);
  ncclGroupStart();
  for (int r = 0; r < 2; ++r) {
    data[r].assign(4096, r + 1);
    ncclAllReduce(data[r].data(), data[r].data(), data[r].size(), ncclInt32, ncclSum, comms[r], nullptr);
  }
  const bool ok = ncclGroupEnd() == ncclSuccess && data[0][4095] == 3 && data[1][0] == 3;
  const int found = socketsWithTrafficClass(trafficClass);
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  return ok ? found : -1;
}

TEST(TrafficClass, ConfigTrafficClassMarksTheCommunicatorsNetworkSockets) {
  ScopedEnv env;
  forceLink(env, Link::kNet);  // ranks of one process talk over the network
  env.set("NCCL_NET", "Socket");
  constexpr int kClass = 0x28;  // DSCP AF11
  ASSERT_EQ(socketsWithTrafficClass(kClass), 0);
  EXPECT_EQ(runAndCount(-1, kClass), 0) << "a communicator without a traffic class leaves the default";
  EXPECT_GE(runAndCount(kClass, kClass), 2) << "each rank's sending connection carries the class";
}

TEST(TrafficClass, OutOfRangeIsRefused) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.trafficClass = 256;
  ncclComm_t comm = reinterpret_cast<ncclComm_t>(0x1);
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("trafficClass is 256"), std::string::npos);
}

// A communicator that names the socket net gets it (any case); one that names a net
// this process has not got fails its init with a WARN naming it.
TEST(NetName, PicksTheCommunicatorsNet) {
  ScopedEnv env;
  forceLink(env, Link::kNet);
  EXPECT_GE(runAndCount(0x20, 0x20, "socket"), 2) << "over the socket net, named in lower case";
  std::vector<ncclComm_t> comms(2, nullptr);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.netName = "NoSuchNet";
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) ncclCommInitRankConfig(&comms[r], 2, id, r, &config);
  EXPECT_NE(ncclGroupEnd(), ncclSuccess);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("NoSuchNet"), std::string::npos) << ncclGetLastError(nullptr);
  for (ncclComm_t c : comms)
    if (c) ncclCommDestroy(c);
}

// As NCCL: a missing named net fails the init even on one host, where no connection
// needs a net; every rank fails, not only the one that asked.
TEST(NetName, AMissingNetFailsTheInitOnOneHost) {
  std::vector<ncclComm_t> comms(2, nullptr);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t asks = NCCL_CONFIG_INITIALIZER;
  asks.netName = "NoSuchNet";
  ncclConfig_t plain = NCCL_CONFIG_INITIALIZER;
  std::vector<ncclResult_t> results(2, ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) results[r] = ncclCommInitRankConfig(&comms[r], 2, id, r, r == 1 ? &asks : &plain);
  const ncclResult_t end = ncclGroupEnd();
  EXPECT_EQ(end, ncclInvalidUsage);
  const std::string why = ncclGetLastError(nullptr);
  EXPECT_NE(why.find("rank 1 asked for a net that is not usable"), std::string::npos) << why;
  for (ncclComm_t c : comms) {
    ncclResult_t state = ncclSuccess;
    if (c != nullptr) {
      ncclCommGetAsyncError(c, &state);
      EXPECT_NE(state, ncclSuccess) << "a rank's communicator came up";
      ncclCommDestroy(c);
    }
  }
}

}  // namespace
}  // namespace chorus_test
