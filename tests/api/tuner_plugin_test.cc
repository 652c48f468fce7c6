// External tuner plugins through the public API, loaded as NCCL loads them
// (NCCL_TUNER_PLUGIN=<path>): the test plugin of tests/plugins (ncclTunerPlugin_v5 and v4
// builds) forcing Tree/LL for small AllReduces, checked in the TUNING log lines, with
// results checked by the harness; init and destroy once per communicator (splits included)
// in the plugin's own record; NCCL_TUNER_PLUGIN=none, a missing file, a library without a
// tuner table and a plugin that disables everything leave Chorus' own tuning in charge,
// with the WARNs they deserve.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness/collective_case.h"
#include "harness/failure_log.h"
#include "harness/rank_launcher.h"
#include "harness/record_file.h"
#include "harness/scoped_env.h"
#include "harness/tuning_log.h"
#include "nccl.h"

namespace chorus_test {
namespace {

constexpr size_t kForcedMaxBytes = 65536;

std::string pluginPath(const char* file) { return std::string(CHORUS_TEST_TUNER_PLUGIN_DIR) + "/" + file; }

// The file the test plugin records its calls in (CHORUS_TEST_TUNER_RECORD), for one test.
class PluginRecord : public RecordFile {
 public:
  explicit PluginRecord(ScopedEnv& env) : RecordFile("chorus_tuner_api_record") {
    env.set("CHORUS_TEST_TUNER_RECORD", path());
  }
};

// The word after `key` in a record line ("ctx", "nRanks", "commId").
std::string field(const std::string& line, const std::string& key) {
  const size_t at = line.find(" " + key + " ");
  if (at == std::string::npos) return "";
  const size_t start = at + key.size() + 2;
  return line.substr(start, line.find(' ', start) - start);
}

// AllReduce at sizes on both sides of kForcedMaxBytes, and a Broadcast and an AllGather
// the plugin leaves alone; returns the cases in call order.
std::vector<CollectiveCase> plannedCases(int nranks) {
  std::vector<CollectiveCase> cases;
  uint64_t seed = 1;
  for (size_t count : {size_t(1), size_t(1000), kForcedMaxBytes / 4, kForcedMaxBytes / 4 + 1, size_t(1) << 18}) {
    cases.push_back({Collective::kAllReduce, ncclFloat32, OpKind::kSum, count, false, 0, seed++});
  }
  cases.push_back({Collective::kAllReduce, ncclInt8, OpKind::kMax, 4097, true, 0, seed++});
  cases.push_back({Collective::kBroadcast, ncclFloat32, OpKind::kSum, 5000, false, nranks - 1, seed++});
  cases.push_back({Collective::kAllGather, ncclFloat32, OpKind::kSum, 3000, false, 0, seed++});
  return cases;
}

RankOutcome runCases(const RankContext& context, const std::vector<CollectiveCase>& cases) {
  FailureLog failures;
  CollectiveRankRunner runner(context.rank, context.nranks);
  for (const CollectiveCase& c : cases) runner.run(c, context.comm, failures);
  return failures.outcome();
}

// Whether a logged choice is what Chorus' own model picks: the cheapest of the estimates
// the line lists, "(off)" ones aside ("tree/ll 1.23, ..., ring/simple 4.56 (off)").
bool isChorusOwnChoice(const TuningChoice& c) {
  const size_t open = c.line.find(" us (");
  if (open == std::string::npos) return false;
  std::string chosen = c.algo + "/" + c.proto;
  for (char& ch : chosen) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  double cheapest = 1e300;
  double chosenTime = -1;
  std::istringstream list(c.line.substr(open + 5));
  for (std::string item; std::getline(list, item, ',');) {
    std::istringstream words(item);
    std::string pair;
    double time = 0;
    if (!(words >> pair >> time) || pair.find('/') == std::string::npos) break;  // past the list
    if (item.find("(off)") != std::string::npos) continue;
    cheapest = std::min(cheapest, time);
    if (pair == chosen) chosenTime = time;
  }
  return chosenTime >= 0 && chosenTime <= cheapest && std::abs(chosenTime - c.timeUs) < 0.006;
}

size_t countLines(const TuningLogCapture& log, const std::string& text) {
  size_t n = 0;
  for (const std::string& line : log.lines()) n += line.find(text) != std::string::npos;
  return n;
}

struct ForcedCase {
  LaunchMode mode;
  int nranks;
  const char* library;
  int version;
};
void PrintTo(const ForcedCase& c, std::ostream* out) {
  *out << launchModeName(c.mode) << "_" << c.nranks << "ranks_v" << c.version;
}

class TunerPluginForcedTest : public testing::TestWithParam<ForcedCase> {};

TEST_P(TunerPluginForcedTest, ForcedChoiceRunsResultsStayCorrectAndEachCommunicatorInitsOnce) {
  const ForcedCase param = GetParam();
  ScopedEnv env;
  env.unset("NCCL_ALGO");
  env.unset("NCCL_PROTO");
  env.set("NCCL_TUNER_PLUGIN", pluginPath(param.library));
  env.set("CHORUS_TEST_TUNER_RULES", "force=tree/ll/" + std::to_string(kForcedMaxBytes) + ",channels=1");
  PluginRecord record(env);
  TuningLogCapture log(env, "TUNING,INIT");
  const std::vector<CollectiveCase> cases = plannedCases(param.nranks);
  EXPECT_RANKS_OK(runRanks(param.mode, param.nranks, [&](const RankContext& c) { return runCases(c, cases); }));

  // Every rank: each AllReduce of at most kForcedMaxBytes ran Tree/LL, the larger ones and
  // the other collectives what Chorus' model picks.
  std::map<int, int> forcedByRank;
  for (const TuningChoice& c : log.choices()) {
    const bool forced = c.collective == "AllReduce" && c.bytes <= kForcedMaxBytes;
    if (forced) {
      EXPECT_EQ(c.algo, "Tree") << c.line;
      EXPECT_EQ(c.proto, "LL") << c.line;
      EXPECT_NE(c.line.find("chosen by tuner chorustest-v" + std::to_string(param.version) + ", nChannels 1"),
                std::string::npos)
          << c.line;
      ++forcedByRank[c.rank];
    } else {
      EXPECT_TRUE(isChorusOwnChoice(c)) << c.line;
      EXPECT_NE(c.line.find("kept by tuner chorustest-v" + std::to_string(param.version) + ", nChannels 1"),
                std::string::npos)
          << c.line;
    }
  }
  ASSERT_EQ(forcedByRank.size(), static_cast<size_t>(param.nranks));
  for (const auto& [rank, n] : forcedByRank) EXPECT_EQ(n, 4) << "forced calls on rank " << rank;
  EXPECT_EQ(countLines(log, "TUNER/Plugin: Using chorustest-v" + std::to_string(param.version) + " (ncclTunerPlugin_v" +
                                std::to_string(param.version) + ")"),
            param.mode == LaunchMode::kThreads ? 1u : static_cast<size_t>(param.nranks))
      << "once per process";
  EXPECT_EQ(countLines(log, "chorustest tuner v" + std::to_string(param.version) + " ready"),
            static_cast<size_t>(param.nranks))
      << "the plugin's own log line, through Chorus' log";

  // init once per communicator, destroy once each, with the same contexts.
  const std::vector<std::string> inits = record.lines("init");
  const std::vector<std::string> destroys = record.lines("destroy");
  ASSERT_EQ(inits.size(), static_cast<size_t>(param.nranks));
  EXPECT_EQ(destroys.size(), static_cast<size_t>(param.nranks));
  std::set<std::string> initContexts;
  std::set<std::string> destroyContexts;
  std::set<std::string> commIds;
  for (const std::string& line : inits) {
    initContexts.insert(field(line, "ctx"));
    EXPECT_EQ(field(line, "nRanks"), std::to_string(param.nranks)) << line;
    EXPECT_EQ(field(line, "nNodes"), "1") << line;
    if (param.version >= 5) commIds.insert(field(line, "commId"));
  }
  for (const std::string& line : destroys) destroyContexts.insert(field(line, "ctx"));
  EXPECT_EQ(initContexts.size(), static_cast<size_t>(param.nranks));
  EXPECT_EQ(initContexts, destroyContexts);
  if (param.version >= 5) {
    EXPECT_EQ(commIds.size(), 1u) << "every rank's commId is the same";
  }
}

INSTANTIATE_TEST_SUITE_P(Slices, TunerPluginForcedTest,
                         testing::Values(ForcedCase{LaunchMode::kThreads, 2, "libnccl-tuner-chorustest.so", 5},
                                         ForcedCase{LaunchMode::kThreads, 4, "libnccl-tuner-chorustest4.so", 4},
                                         ForcedCase{LaunchMode::kProcesses, 3, "libnccl-tuner-chorustest.so", 5},
                                         ForcedCase{LaunchMode::kProcesses, 2, "libnccl-tuner-chorustest4.so", 4}),
                         [](const testing::TestParamInfo<ForcedCase>& info) {
                           return std::string(launchModeName(info.param.mode)) + "_" +
                                  std::to_string(info.param.nranks) + "ranks_v" + std::to_string(info.param.version);
                         });

TEST(TunerPlugin, SplitCommunicatorsInitAndDestroyTheirOwn) {
  ScopedEnv env;
  env.set("NCCL_TUNER_PLUGIN", pluginPath("libnccl-tuner-chorustest.so"));
  env.set("CHORUS_TEST_TUNER_RULES", "force=tree/ll/65536");
  PluginRecord record(env);
  constexpr int kRanks = 4;
  EXPECT_RANKS_OK(runRanks(LaunchMode::kProcesses, kRanks, [](const RankContext& context) {
    FailureLog failures;
    ncclComm_t half = nullptr;
    ncclResult_t split = ncclCommSplit(context.comm, context.rank % 2, context.rank, &half, nullptr);
    if (split != ncclSuccess) return RankOutcome::fail("ncclCommSplit: " + resultName(split));
    CollectiveRankRunner runner(context.rank / 2, 2);
    runner.run({Collective::kAllReduce, ncclFloat32, OpKind::kSum, 1000, false, 0, 11}, half, failures);
    ncclResult_t destroyed = ncclCommDestroy(half);
    if (destroyed != ncclSuccess) failures.add("ncclCommDestroy(split): " + resultName(destroyed));
    return failures.outcome();
  }));
  const std::vector<std::string> inits = record.lines("init");
  ASSERT_EQ(inits.size(), 2u * kRanks) << "the communicator and its split, on every rank";
  EXPECT_EQ(record.lines("destroy").size(), 2u * kRanks);
  std::map<std::string, int> ranksPerCommId;
  for (const std::string& line : inits) ++ranksPerCommId[field(line, "commId") + " nRanks " + field(line, "nRanks")];
  ASSERT_EQ(ranksPerCommId.size(), 3u) << "the parent and two halves";
  for (const auto& [id, n] : ranksPerCommId) EXPECT_EQ(n, id.ends_with("nRanks 4") ? 4 : 2) << id;
}

// Every logged choice is Chorus' own.
void expectChorusOwnChoices(const TuningLogCapture& log) {
  size_t choices = 0;
  for (const TuningChoice& c : log.choices()) {
    EXPECT_TRUE(isChorusOwnChoice(c)) << c.line;
    EXPECT_EQ(c.line.find("chosen by tuner"), std::string::npos) << c.line;
    ++choices;
  }
  EXPECT_GT(choices, 0u);
}

TEST(TunerPlugin, NoneIgnoresThePlugin) {
  ScopedEnv env;
  env.set("NCCL_TUNER_PLUGIN", "none");
  env.set("CHORUS_TEST_TUNER_RULES", "force=tree/ll/1000000000");
  PluginRecord record(env);
  TuningLogCapture log(env, "TUNING,INIT");
  const std::vector<CollectiveCase> cases = plannedCases(2);
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, 2, [&](const RankContext& c) { return runCases(c, cases); }));
  expectChorusOwnChoices(log);
  EXPECT_TRUE(record.lines("init").empty());
  EXPECT_EQ(countLines(log, "NCCL WARN"), 0u);
}

// A plugin that cannot be used: one WARN naming `expected` in each process, Chorus' own
// tuning, correct results.
void expectUnusablePluginWarnsAndChorusWorks(const std::string& setting, const std::string& expected) {
  ScopedEnv env;
  env.set("NCCL_TUNER_PLUGIN", setting);
  PluginRecord record(env);
  TuningLogCapture log(env, "TUNING,INIT");
  const std::vector<CollectiveCase> cases = plannedCases(3);
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, 3, [&](const RankContext& c) { return runCases(c, cases); }));
  expectChorusOwnChoices(log);
  size_t warnings = 0;
  for (const std::string& line : log.lines()) {
    if (line.find("NCCL WARN") == std::string::npos) continue;
    ++warnings;
    EXPECT_NE(line.find(expected), std::string::npos) << line;
  }
  EXPECT_EQ(warnings, 1u) << "one WARN for the process";
}

TEST(TunerPlugin, MissingFileWarnsAndChorusStillWorks) {
  expectUnusablePluginWarnsAndChorusWorks("/no/such/dir/libnccl-tuner-api-missing.so",
                                          "/no/such/dir/libnccl-tuner-api-missing.so");
}

TEST(TunerPlugin, LibraryWithoutATunerTableWarnsAndChorusStillWorks) {
  // The test plugin's directory holds libraries that are no tuners: the net test plugin.
  const std::string netPlugin = std::string(CHORUS_TEST_NET_PLUGIN_DIR) + "/libnccl-net-chorustest.so";
  expectUnusablePluginWarnsAndChorusWorks(netPlugin, "ncclTunerPlugin_v5");
}

TEST(TunerPlugin, DisablingEverythingFallsBackWithOneWarnPerCommunicator) {
  ScopedEnv env;
  env.set("NCCL_TUNER_PLUGIN", pluginPath("libnccl-tuner-chorustest.so"));
  env.set("CHORUS_TEST_TUNER_RULES", "disable=all");
  PluginRecord record(env);
  TuningLogCapture log(env, "TUNING,INIT");
  constexpr int kRanks = 3;
  const std::vector<CollectiveCase> cases = plannedCases(kRanks);
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, kRanks, [&](const RankContext& c) { return runCases(c, cases); }));
  for (const TuningChoice& c : log.choices()) {
    EXPECT_TRUE(isChorusOwnChoice(c)) << c.line;
    EXPECT_NE(c.line.find("tuner chorustest-v5 not followed"), std::string::npos) << c.line;
  }
  EXPECT_EQ(countLines(log, "NCCL WARN"), static_cast<size_t>(kRanks));
  EXPECT_EQ(countLines(log, "disabled every algorithm and protocol Chorus can run"), static_cast<size_t>(kRanks));
  EXPECT_EQ(record.lines("init").size(), static_cast<size_t>(kRanks));
  EXPECT_EQ(record.lines("destroy").size(), static_cast<size_t>(kRanks));
}

}  // namespace
}  // namespace chorus_test
