// Collectives through an external net plugin, loaded as NCCL loads one: the test plugins
// of tests/plugins (SocketNet behind NCCL's ncclNet_v8, v10 and v11 tables), chosen with
// NCCL_NET_PLUGIN, ranks as processes with P2P and SHM disabled so that every connection
// goes through the plugin. Checks results (the collective matrix's AllReduce and
// AllGather slices, send/recv) and that the INFO lines name the plugin's net.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/collective_case.h"
#include "harness/collective_matrix.h"
#include "harness/failure_log.h"
#include "harness/fresh_process.h"
#include "harness/links.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "harness/send_recv_case.h"
#include "harness/tuning_log.h"
#include "nccl.h"

namespace chorus_test {
namespace {

struct PluginCase {
  const char* library;  // file in CHORUS_TEST_NET_PLUGIN_DIR
  const char* netName;  // the table's name
};

class NetPluginCollectivesTest : public testing::TestWithParam<PluginCase> {};

TEST_P(NetPluginCollectivesTest, CollectivesMatchTheReferenceThroughThePlugin) {
  if (!inFreshProcess()) return;  // a process picks its net once (as NCCL); forked ranks inherit it
  ScopedEnv env;
  env.set("NCCL_NET_PLUGIN", std::string(CHORUS_TEST_NET_PLUGIN_DIR) + "/" + GetParam().library);
  forceLink(env, Link::kNet);
  env.set("CHORUS_TEST_MAX_COUNT", "1023");
  TuningLogCapture log(env, "INIT,NET");
  EXPECT_RANKS_OK(runRanks(LaunchMode::kProcesses, 3, [](const RankContext& context) {
    CollectiveRankRunner runner(context.rank, context.nranks);
    FailureLog failures;
    for (Collective collective : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduce}) {
      for (const CollectiveCase& c : buildCases(collective, context.nranks)) runner.run(c, context.comm, failures);
    }
    for (size_t count : {size_t{0}, size_t{1}, size_t{4099}, size_t{1} << 20}) {
      for (int shift : {1, 2}) {
        runSendRecvCase(SendRecvCase{ncclFloat32, count, shift, 7}, context.comm, context.rank, context.nranks,
                        failures);
      }
    }
    return failures.outcome();
  }));
  const std::string via = std::string("via NET/") + GetParam().netName;
  int connections = 0;
  for (const std::string& line : log.lines()) connections += line.find(via) != std::string::npos;
  // 3 ranks: every rank sends to its ring neighbour (and tree peers) and to its p2p peers.
  EXPECT_GE(connections, 3) << "no connection logged " << via;
}

INSTANTIATE_TEST_SUITE_P(Abi, NetPluginCollectivesTest,
                         testing::Values(PluginCase{"libnccl-net-chorustest.so", "chorustest-v8"},
                                         PluginCase{"libnccl-net-chorustest10.so", "chorustest-v10"},
                                         PluginCase{"libnccl-net-chorustest11.so", "chorustest-v11"}),
                         [](const testing::TestParamInfo<PluginCase>& info) {
                           return std::string(info.param.netName).substr(std::string("chorustest-").size());
                         });

}  // namespace
}  // namespace chorus_test
