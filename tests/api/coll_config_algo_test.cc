// What an nccl*Config call's config changes about how it runs, through the public API:
// algSelection leaves the algorithm that runs (seen in the TUNING log), with right
// results; unforced, an unknown or impossible selection is the automatic choice; NCCL_ALGO
// narrows what a selection may leave; maxCTAs bounds the call's channels.
#include <gtest/gtest.h>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "harness/config_forms.h"
#include "harness/failure_log.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "harness/tuning_log.h"
#include "harness/untouched_buffers.h"
#include "nccl.h"

namespace chorus_test {
namespace {

constexpr size_t kCounts[] = {2, 2048, 262144, 1048576};  // int32 elements: 8 B to 4 MiB

struct Phase {
  const char* selection;  // nullptr: a NULL config, the automatic choice every other phase is compared with
  int force;
  const char* algo;  // what must run; nullptr: whatever the automatic choice ran
};
const Phase kPhases[] = {
    {nullptr, 1, nullptr},     {"tree", 1, "Tree"},       {"ring", 1, "Ring"},  {"^ring", 1, "Tree"},
    {"RING,Tree", 1, nullptr}, {" ring , ,", 1, "Ring"},  {"nvls", 0, nullptr}, {"bogus", 0, nullptr},
    {"^", 0, nullptr},         {"ring;tree", 0, nullptr},
};

// The logged choices of each rank, in call order.
std::map<int, std::vector<TuningChoice>> choicesByRank(const TuningLogCapture& capture) {
  std::map<int, std::vector<TuningChoice>> byRank;
  for (TuningChoice& c : capture.choices()) byRank[c.rank].push_back(std::move(c));
  return byRank;
}

TEST(CollConfigAlgorithms, SelectionChoosesTheAlgorithmThatRuns) {
  ScopedEnv env;
  env.unset("NCCL_ALGO");
  env.unset("NCCL_PROTO");
  env.set("CHORUS_BOARD", "0");  // the board (device/common/board.h) would take the smallest call on the ring
  TuningLogCapture capture(env);
  // 8 ranks: the smallest call takes the tree (6 hops against a small ring call's 7).
  constexpr int kRanks = 8;
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, kRanks, [](const RankContext& ctx) {
    FailureLog log;
    for (const Phase& phase : kPhases) {
      ncclCollConfig_t config = NCCL_COLLCONFIG_INITIALIZER;
      config.algSelection = phase.selection;
      config.forceAlgSelection = phase.force;
      for (size_t count : kCounts) {
        FormCall call{ConfigForm::kAllReduce, false, phase.selection ? &config : nullptr, ncclInt32, count};
        if (std::string f = runForm(call, ctx.comm, ctx.rank, ctx.nranks); !f.empty())
          log.add(std::string(phase.selection ? phase.selection : "NULL") + ": " + f);
      }
    }
    return log.outcome();
  }));
  const auto byRank = choicesByRank(capture);
  ASSERT_EQ(byRank.size(), static_cast<size_t>(kRanks));
  const size_t nCounts = std::size(kCounts);
  for (const auto& [rank, choices] : byRank) {
    ASSERT_EQ(choices.size(), std::size(kPhases) * nCounts) << "rank " << rank << ": one line per call";
    for (size_t i = 0; i < choices.size(); ++i) {
      const Phase& phase = kPhases[i / nCounts];
      const TuningChoice& automatic = choices[i % nCounts];
      EXPECT_EQ(choices[i].bytes, kCounts[i % nCounts] * 4) << choices[i].line;
      EXPECT_EQ(choices[i].algo, phase.algo ? phase.algo : automatic.algo)
          << "selection \"" << (phase.selection ? phase.selection : "NULL") << "\": " << choices[i].line;
    }
    // The automatic choice differs from each forced one somewhere, so the checks above see
    // the selection's doing: Tree for the smallest call (fewer hops), Ring for the largest
    // (less traffic per byte).
    EXPECT_EQ(choices[0].algo, "Tree") << choices[0].line;
    EXPECT_EQ(choices[nCounts - 1].algo, "Ring") << choices[nCounts - 1].line;
  }
}

// Broadcast's only algorithm is Ring: "ring", "^tree", and "tree" unforced all run it.
TEST(CollConfigAlgorithms, BroadcastAndAlltoAllTakeWhatTheyCanRun) {
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, 3, [](const RankContext& ctx) {
    FailureLog log;
    struct Accepted {
      ConfigForm form;
      const char* selection;
      int force;
    };
    const Accepted accepted[] = {{ConfigForm::kBroadcast, "ring", 1}, {ConfigForm::kBroadcast, "^tree", 1},
                                 {ConfigForm::kBroadcast, "tree", 0}, {ConfigForm::kAlltoAll, "", 1},
                                 {ConfigForm::kAlltoAll, "ring", 0},  {ConfigForm::kGather, "tree", 0},
                                 {ConfigForm::kScatter, "", 1},       {ConfigForm::kReduceScatter, "^tree", 1}};
    for (const Accepted& a : accepted) {
      ncclCollConfig_t config = NCCL_COLLCONFIG_INITIALIZER;
      config.algSelection = a.selection;
      config.forceAlgSelection = a.force;
      FormCall call{a.form, false, &config, ncclFloat32, 4099, 2};
      if (std::string f = runForm(call, ctx.comm, ctx.rank, ctx.nranks); !f.empty())
        log.add(std::string("\"") + a.selection + "\": " + f);
    }
    return log.outcome();
  }));
}

// NCCL_ALGO=Ring leaves AllReduce no tree: a forced "tree" is refused naming the setting,
// an unforced one runs Ring.
TEST(CollConfigAlgorithms, NcclAlgoNarrowsWhatASelectionMayLeave) {
  ScopedEnv env;
  env.set("NCCL_ALGO", "Ring");
  env.unset("NCCL_PROTO");
  TuningLogCapture capture(env);
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, 2, [](const RankContext& ctx) {
    FailureLog log;
    ncclCollConfig_t config = NCCL_COLLCONFIG_INITIALIZER;
    for (const char* refused : {"tree", "^ring"}) {
      config.algSelection = refused;
      FormBuffers buffers;
      const FormCall call{ConfigForm::kAllReduce, false, &config};
      buffers.prepare(call, ctx.rank, ctx.nranks);
      const ncclResult_t r = buffers.issue(call, ctx.comm);
      const std::string warned = ncclGetLastError(ctx.comm);
      if (r != ncclInvalidArgument) log.add(std::string(refused) + " with NCCL_ALGO=Ring returned " + resultName(r));
      if (warned.find("NCCL_ALGO=Ring") == std::string::npos) log.add("the WARN does not name NCCL_ALGO: " + warned);
    }
    config.algSelection = "tree";
    config.forceAlgSelection = 0;
    if (std::string f = runForm(FormCall{ConfigForm::kAllReduce, false, &config}, ctx.comm, ctx.rank, 2); !f.empty())
      log.add(f);
    config.algSelection = "tree,ring";
    config.forceAlgSelection = 1;
    if (std::string f = runForm(FormCall{ConfigForm::kAllReduce, false, &config}, ctx.comm, ctx.rank, 2); !f.empty())
      log.add(f);
    return log.outcome();
  }));
  const auto byRank = choicesByRank(capture);
  ASSERT_EQ(byRank.size(), 2u);
  for (const auto& [rank, choices] : byRank) {
    EXPECT_EQ(choices.size(), 2u) << "rank " << rank << ": the refused calls must not reach the tuner";
    for (const TuningChoice& c : choices) EXPECT_EQ(c.algo, "Ring") << c.line;
  }
}

// With 4 channels, maxCTAs 1 or 2 leaves the others out of the call: the model's estimate
// of a large AllReduce grows as the channels shrink, and calls split over fewer channels
// (as every rank splits them) are right.
TEST(CollConfigChannels, MaxCtasBoundsTheChannelsOfTheCall) {
  ScopedEnv env;
  env.set("NCCL_MIN_NCHANNELS", "4");
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, 2, [](const RankContext& ctx) {
    FailureLog log;
    const UntouchedBuffers& untouched = untouchedBuffers();
    auto estimate = [&](const ncclCollConfig_t* config) {
      ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
      ncclGroupStart();
      ncclAllReduceConfig(untouched.send, untouched.recv, size_t(16) << 20, ncclFloat32, ncclSum, ctx.comm, nullptr,
                          config);
      if (ncclGroupSimulateEnd(&info) != ncclSuccess) log.add("ncclGroupSimulateEnd failed");
      return info.estimatedTime;
    };
    ncclCollConfig_t one = NCCL_COLLCONFIG_INITIALIZER, two = NCCL_COLLCONFIG_INITIALIZER;
    one.maxCTAs = 1;
    two.maxCTAs = 2;
    const float all = estimate(nullptr), onTwo = estimate(&two), onOne = estimate(&one);
    if (!(onTwo > 1.5f * all && onOne > 1.5f * onTwo)) {
      log.add("64 MiB AllReduce estimated at " + std::to_string(all) + " us on 4 channels, " + std::to_string(onTwo) +
              " on 2, " + std::to_string(onOne) + " on 1");
    }
    ncclCollConfig_t minAboveMax = NCCL_COLLCONFIG_INITIALIZER;
    minAboveMax.minCTAs = 4;
    minAboveMax.maxCTAs = 2;
    ncclCollConfig_t three = NCCL_COLLCONFIG_INITIALIZER;
    three.maxCTAs = 3;
    for (const ncclCollConfig_t* config : {&one, &two, &three, &minAboveMax}) {
      for (ConfigForm form : {ConfigForm::kAllReduce, ConfigForm::kReduceScatter, ConfigForm::kAllGather,
                              ConfigForm::kBroadcast, ConfigForm::kReduce}) {
        if (std::string f = runForm(FormCall{form, false, config, ncclInt32, 100003, 1}, ctx.comm, ctx.rank, 2);
            !f.empty())
          log.add("maxCTAs " + std::to_string(config->maxCTAs) + ": " + f);
      }
    }
    return log.outcome();
  }));
}

}  // namespace
}  // namespace chorus_test
