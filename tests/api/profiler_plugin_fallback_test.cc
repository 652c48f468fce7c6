// Profiler plugins that are not used: NCCL_PROFILER_PLUGIN=none (no plugin, no WARN), a
// path that does not exist, a library without a profiler table, and a plugin whose init
// fails. Each of the last three is a WARN naming the file and the cause, and the
// communicators run without the plugin, with the same results, on threads and processes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/failure_log.h"
#include "harness/profiler_log.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "nccl.h"

namespace chorus_test {
namespace {

std::string pluginPath(const char* file) { return std::string(CHORUS_TEST_PROFILER_PLUGIN_DIR) + "/" + file; }

// A group of AllReduce and a Send/Recv ring, then a lone AllReduce: the results must be
// right. `warning`: what ncclGetLastError must contain after init (empty: no new profiler
// WARN since the test began, when the process's last error was `before`).
RankOutcome runAndCheck(int rank, int nranks, const ncclUniqueId& id, const std::vector<std::string>& warning,
                        const std::string& before) {
  FailureLog log;
  ncclComm_t comm = nullptr;
  if (ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank); r != ncclSuccess)
    return RankOutcome::fail("ncclCommInitRank returned " + resultName(r));
  // This thread's last WARN, else the process's (the loader WARNs once per process).
  const std::string lastError = ncclGetLastError(comm);
  if (warning.empty() && lastError != before && lastError.find("PROFILER") != std::string::npos)
    log.add("a profiler WARN without a plugin: " + lastError);
  for (const std::string& part : warning)
    if (lastError.find(part) == std::string::npos) log.add("the WARN lacks '" + part + "': " + lastError);
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  std::vector<int64_t> values(513, rank + 1), sent(77, rank), received(77, -1);
  ncclGroupStart();
  ncclAllReduce(values.data(), values.data(), values.size(), ncclInt64, ncclSum, comm, nullptr);
  ncclSend(sent.data(), sent.size(), ncclInt64, next, comm, nullptr);
  ncclRecv(received.data(), received.size(), ncclInt64, prev, comm, nullptr);
  if (ncclResult_t r = ncclGroupEnd(); r != ncclSuccess) log.add("ncclGroupEnd returned " + resultName(r));
  for (int64_t v : values)
    if (v != nranks * (nranks + 1) / 2) log.add("AllReduce: " + std::to_string(v));
  for (int64_t v : received)
    if (v != prev) log.add("Recv: " + std::to_string(v));
  int64_t one = 1, total = 0;
  if (ncclResult_t r = ncclAllReduce(&one, &total, 1, ncclInt64, ncclSum, comm, nullptr); r != ncclSuccess)
    log.add("lone AllReduce returned " + resultName(r));
  if (total != nranks) log.add("lone AllReduce: " + std::to_string(total));
  if (ncclResult_t r = ncclCommDestroy(comm); r != ncclSuccess) log.add("ncclCommDestroy returned " + resultName(r));
  return log.outcome();
}

struct FallbackCase {
  const char* name;
  std::string setting;               // NCCL_PROFILER_PLUGIN
  bool failInit;                     // CHORUS_TEST_PROFILER_FAIL_INIT=1
  std::vector<std::string> warning;  // what the WARN names ("$SETTING": the setting)
  size_t initLines;                  // init lines the plugin writes per rank (a failing init writes one)
};

// A setting that failed to load is not tried again in the process (nor in the children
// it forks later): each launch mode gets a spelling of the path of its own.
std::string settingFor(const std::string& setting, LaunchMode mode) {
  const size_t slash = setting.rfind('/');
  if (mode == LaunchMode::kThreads || slash == std::string::npos) return setting;
  return setting.substr(0, slash) + "/." + setting.substr(slash);
}

class ProfilerFallbackTest : public testing::TestWithParam<std::tuple<FallbackCase, LaunchMode>> {};

TEST_P(ProfilerFallbackTest, RunsWithoutThePlugin) {
  const auto& [c, mode] = GetParam();
  const std::string setting = settingFor(c.setting, mode);
  ScopedEnv env;
  env.set("NCCL_PROFILER_PLUGIN", setting);
  env.set("CHORUS_TEST_PROFILER_FAIL_INIT", c.failInit ? "1" : "0");
  ProfilerLog profile(env);
  const int nranks = 2;
  std::vector<std::string> warning = c.warning;
  for (std::string& part : warning)
    if (part == "$SETTING") part = setting;
  const std::string before = ncclGetLastError(nullptr);
  EXPECT_RANKS_OK(runRanksWithId(mode, nranks, [&](int rank, int n, const ncclUniqueId& id) {
    return runAndCheck(rank, n, id, warning, before);
  }));
  // The plugin ran no further than its init: no event, no finalize.
  size_t inits = 0;
  for (const std::string& file : profile.files()) {
    for (const ProfilerRecord& r : profile.records(file)) {
      if (r.op == "init") {
        ++inits;
      } else {
        ADD_FAILURE() << "the plugin was used: " << r.line;
      }
    }
  }
  EXPECT_EQ(inits, c.initLines * nranks);
}

std::vector<FallbackCase> fallbackCases() {
  const std::string missing = "/nonexistent/libnccl-profiler-missing.so";
  const std::string netPlugin = pluginPath("libnccl-net-chorustest.so");
  const std::string failing = pluginPath("libnccl-profiler-chorustest.so");
  return {
      FallbackCase{"None", "none", false, {}, 0},
      FallbackCase{"MissingPath", missing, false, {"PROFILER", "$SETTING", "No such file"}, 0},
      FallbackCase{"NoProfilerTable", netPlugin, false, {"PROFILER", "$SETTING", "exports none of"}, 0},
      FallbackCase{"FailingInit", failing, true, {"PROFILER", "$SETTING", "init failed", "system error"}, 1},
  };
}

INSTANTIATE_TEST_SUITE_P(Plugins, ProfilerFallbackTest,
                         testing::Combine(testing::ValuesIn(fallbackCases()),
                                          testing::Values(LaunchMode::kThreads, LaunchMode::kProcesses)),
                         [](const testing::TestParamInfo<std::tuple<FallbackCase, LaunchMode>>& info) {
                           return std::string(std::get<0>(info.param).name) + "_" +
                                  launchModeName(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace chorus_test
