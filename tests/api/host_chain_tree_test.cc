// Ranks of several hosts (NCCL_HOSTID per process, so ranks of different "hosts" meet over
// the network and those of one host over shared memory): AllReduce on the tree, whose
// ranks form a chain per host under a double binary tree of hosts (src/comm/trees.h; a
// chain's head has up to three children), gives exact results with every protocol, at
// counts that take one step, several steps and several channels; so does the default
// choice. Hosts hold unequal numbers of ranks and are interleaved in rank order.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness/collective_case.h"
#include "harness/failure_log.h"
#include "harness/rank_launcher.h"
#include "nccl.h"

namespace chorus_test {
namespace {

struct HostLayout {
  const char* name;
  std::vector<int> hostOfRank;
};

void runOnHosts(const HostLayout& layout, const char* algo, const char* proto) {
  const int nranks = static_cast<int>(layout.hostOfRank.size());
  const std::vector<int> hostOf = layout.hostOfRank;
  const std::string algoSetting = algo, protoSetting = proto;
  EXPECT_RANKS_OK(runRanksWithId(
      LaunchMode::kProcesses, nranks,
      [&](int rank, int n, const ncclUniqueId& id) {
        char host[32];
        snprintf(host, sizeof(host), "chorus-test-host-%d", hostOf[rank]);
        setenv("NCCL_HOSTID", host, 1);
        if (!algoSetting.empty()) setenv("NCCL_ALGO", algoSetting.c_str(), 1);
        if (!protoSetting.empty()) setenv("NCCL_PROTO", protoSetting.c_str(), 1);
        setenv("NCCL_BUFFSIZE", "65536", 1);   // several steps at small counts
        setenv("NCCL_MIN_NCHANNELS", "2", 1);  // both trees
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return RankOutcome::fail("init failed");
        FailureLog log;
        CollectiveRankRunner runner(rank, n);
        uint64_t seed = 1;
        for (size_t count : {size_t(1), size_t(1000), size_t(70000)}) {
          for (bool inPlace : {false, true}) {
            CollectiveCase c;
            c.collective = Collective::kAllReduce;
            c.type = ncclFloat32;
            c.op = OpKind::kSum;
            c.count = count;
            c.inPlace = inPlace;
            c.seed = seed++;
            runner.run(c, comm, log);
          }
        }
        if (ncclCommDestroy(comm) != ncclSuccess) log.add("destroy failed");
        return log.outcome();
      },
      std::chrono::seconds(120)));
}

const HostLayout kLayouts[] = {
    {"TwoHostsInterleaved", {0, 1, 0, 1, 0, 1}},
    {"ThreeHostsUneven", {2, 0, 1, 2, 0, 1, 1}},
};

TEST(HostChainTree, TreeAllReduceIsExactOnEveryProtocol) {
  for (const HostLayout& layout : kLayouts) {
    for (const char* proto : {"Simple", "LL", "LL128"}) {
      SCOPED_TRACE(std::string(layout.name) + " " + proto);
      runOnHosts(layout, "Tree", proto);
    }
  }
}

TEST(HostChainTree, TheDefaultChoiceIsExact) {
  for (const HostLayout& layout : kLayouts) {
    SCOPED_TRACE(layout.name);
    runOnHosts(layout, "", "");
  }
}

}  // namespace
}  // namespace chorus_test
