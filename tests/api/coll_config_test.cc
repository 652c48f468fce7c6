// The per-collective nccl*Config forms (NCCL 2.31+) through the public API. With a default
// or NULL config each gives its plain collective's result. A refused config fails its own
// call, before anything is queued and before the communicator is looked at, and leaves
// its group working. Hint fields are accepted and named once per communicator.
// coll_config_algo_test.cc: algSelection, NCCL_ALGO and maxCTAs.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "harness/config_forms.h"
#include "harness/failure_log.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "harness/tuning_log.h"
#include "nccl.h"

namespace chorus_test {
namespace {

// NVIDIA's layout (nccl.h of NCCL 2.32.3): programs built against it pass this struct.
static_assert(offsetof(ncclCollConfig_t, magic) == 8 && offsetof(ncclCollConfig_t, version) == 12);
static_assert(offsetof(ncclCollConfig_t, ext) == 16 && offsetof(ncclCollConfig_t, minCTAs) == 24);
static_assert(offsetof(ncclCollConfig_t, maxCTAs) == 28 && offsetof(ncclCollConfig_t, nvlsCTAs) == 32);
static_assert(offsetof(ncclCollConfig_t, cgaClusterSize) == 36 && offsetof(ncclCollConfig_t, algSelection) == 40);
static_assert(offsetof(ncclCollConfig_t, forceAlgSelection) == 48 && offsetof(ncclCollConfig_t, CTAPolicy) == 52);
static_assert(offsetof(ncclCollConfig_t, userProfilerTag) == 56);
static_assert(offsetof(ncclCollConfig_t, launchCompletionEvent) == 64 && sizeof(ncclCollConfig_t) == 72);
static_assert(sizeof(ncclConfigExt_t) == 24 && offsetof(ncclConfigExt_t, val) == 16);

TEST(CollConfig, InitializerHoldsNcclsDefaults) {
  const ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
  EXPECT_EQ(c.size, sizeof(ncclCollConfig_t));
  EXPECT_EQ(c.magic, 0xcafebeefu);
  EXPECT_EQ(c.version, static_cast<unsigned>(NCCL_VERSION_CODE));
  EXPECT_EQ(c.ext, nullptr);
  for (int v : {c.minCTAs, c.maxCTAs, c.nvlsCTAs, c.cgaClusterSize, c.CTAPolicy}) EXPECT_EQ(v, NCCL_CONFIG_UNDEF_INT);
  EXPECT_EQ(c.algSelection, nullptr);
  EXPECT_EQ(c.forceAlgSelection, 1);
  EXPECT_EQ(c.userProfilerTag, 0u);
  EXPECT_EQ(c.launchCompletionEvent, nullptr);
}

TEST(CollConfig, EveryFormIsExportedWithItsProfilingAlias) {
  for (const char* form :
       {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AlltoAll", "Gather", "Scatter"}) {
    const std::string name = std::string("nccl") + form + "Config";
    EXPECT_NE(dlsym(RTLD_DEFAULT, name.c_str()), nullptr) << name;
    EXPECT_NE(dlsym(RTLD_DEFAULT, ("p" + name).c_str()), nullptr) << "p" << name;
  }
}

struct Slice {
  LaunchMode mode;
  int nranks;
};

void PrintTo(const Slice& s, std::ostream* out) { *out << launchModeName(s.mode) << "_" << s.nranks << "ranks"; }

class CollConfigForms : public testing::TestWithParam<Slice> {};

// Every form through its plain entry point, its Config form with the initializer, and with
// NULL, in int32 and float32: the same exact results (roots vary, the last rank included).
TEST_P(CollConfigForms, DefaultAndNullConfigsGiveThePlainResult) {
  EXPECT_RANKS_OK(runRanks(GetParam().mode, GetParam().nranks, [](const RankContext& ctx) {
    FailureLog log;
    const ncclCollConfig_t defaults = NCCL_COLLCONFIG_INITIALIZER;
    int call = 0;
    for (ConfigForm form : kAllConfigForms) {
      for (ncclDataType_t type : {ncclInt32, ncclFloat32}) {
        for (int entry = 0; entry < 3; ++entry) {
          FormCall c{form, entry == 0, entry == 1 ? &defaults : nullptr, type};
          c.root = ++call % ctx.nranks;
          if (std::string failure = runForm(c, ctx.comm, ctx.rank, ctx.nranks); !failure.empty()) log.add(failure);
        }
      }
    }
    return log.outcome();
  }));
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollConfigForms,
                         testing::Values(Slice{LaunchMode::kThreads, 2}, Slice{LaunchMode::kThreads, 4},
                                         Slice{LaunchMode::kProcesses, 2}),
                         [](const testing::TestParamInfo<Slice>& info) {
                           return std::string(launchModeName(info.param.mode)) + "_" +
                                  std::to_string(info.param.nranks) + "ranks";
                         });

struct Refused {
  ConfigForm form;
  std::function<void(ncclCollConfig_t&)> set;
  std::string named;  // the WARN must contain this (field and value)
};

const std::vector<Refused>& refusedConfigs() {
  using C = ncclCollConfig_t&;
  auto select = [](const char* text) { return [text](C c) { c.algSelection = text; }; };
  static const std::vector<Refused> cases = {
      {ConfigForm::kAllReduce, [](C c) { c.size = 8; }, "config->size is 8"},
      {ConfigForm::kAllReduce, [](C c) { c.size = 56; }, "config->size is 56"},
      {ConfigForm::kAllReduce, [](C c) { c.magic = 0x1234; }, "config->magic is 0x1234"},
      {ConfigForm::kAllReduce, [](C c) { c.forceAlgSelection = 2; }, "config->forceAlgSelection is 2"},
      {ConfigForm::kAllReduce, [](C c) { c.forceAlgSelection = -1; }, "config->forceAlgSelection is -1"},
      {ConfigForm::kAllReduce, [](C c) { c.CTAPolicy = 4; }, "config->CTAPolicy is 4"},
      {ConfigForm::kAllReduce, [](C c) { c.CTAPolicy = -5; }, "config->CTAPolicy is -5"},
      {ConfigForm::kAllReduce, select("nvls"), "config->algSelection \"nvls\""},
      {ConfigForm::kAllReduce, select("pat"), "config->algSelection \"pat\""},
      {ConfigForm::kAllReduce, select("collnetdirect"), "config->algSelection \"collnetdirect\""},
      {ConfigForm::kAllReduce, select("bogus"), "unknown algorithm 'bogus'"},
      {ConfigForm::kAllReduce, select("ring,bogus"), "unknown algorithm 'bogus'"},
      {ConfigForm::kAllReduce, select("^"), "config->algSelection \"^\" names no algorithm"},
      {ConfigForm::kAllReduce, select("ring;tree"), "unknown algorithm 'ring;tree'"},
      {ConfigForm::kBroadcast, select("tree"), "config->algSelection \"tree\""},
      {ConfigForm::kBroadcast, select("^ring"), "config->algSelection \"^ring\""},
      {ConfigForm::kAlltoAll, select("ring"), "config->algSelection \"ring\""},
      {ConfigForm::kGather, select("^tree"), "config->algSelection \"^tree\""},
      {ConfigForm::kReduceScatter, select("tree"), "config->algSelection \"tree\""},
      // Checked in order: size, magic, forceAlgSelection, CTAPolicy, algSelection.
      {ConfigForm::kAllReduce,
       [](C c) {
         c.size = 8;
         c.magic = 0;
       },
       "config->size is 8"},
      {ConfigForm::kAllReduce,
       [](C c) {
         c.magic = 1;
         c.forceAlgSelection = 2;
       },
       "config->magic is 0x1"},
      {ConfigForm::kScatter,
       [](C c) {
         c.forceAlgSelection = 7;
         c.CTAPolicy = 4;
       },
       "forceAlgSelection is 7"},
      {ConfigForm::kReduce,
       [](C c) {
         c.CTAPolicy = 8;
         c.algSelection = "bogus";
       },
       "config->CTAPolicy is 8"},
  };
  return cases;
}

// Refused on a communicator (nothing written: nothing was queued) and on a NULL one (the
// WARN names the config, not the communicator: it is never looked at).
TEST(CollConfig, RefusedConfigsFailTheCallNamingFieldAndValue) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  for (const Refused& r : refusedConfigs()) {
    ncclCollConfig_t config = NCCL_COLLCONFIG_INITIALIZER;
    r.set(config);
    const FormCall call{r.form, false, &config};
    const std::string func = std::string("nccl") + configFormName(r.form) + "Config";
    for (ncclComm_t target : {comm, static_cast<ncclComm_t>(nullptr)}) {
      SCOPED_TRACE(func + " " + r.named + (target ? "" : " on a NULL comm"));
      FormBuffers buffers;
      buffers.prepare(call, 0, 1);
      EXPECT_EQ(buffers.issue(call, target), ncclInvalidArgument);
      const std::string warned = ncclGetLastError(comm);
      EXPECT_NE(warned.find(func + ": invalid argument: "), std::string::npos) << warned;
      EXPECT_NE(warned.find(r.named), std::string::npos) << warned;
      EXPECT_TRUE(buffers.receiveUntouched());
    }
  }
  // A good config on a NULL communicator: now the communicator is what is refused.
  const ncclCollConfig_t good = NCCL_COLLCONFIG_INITIALIZER;
  FormBuffers buffers;
  buffers.prepare(FormCall{ConfigForm::kAllReduce, false, &good}, 0, 1);
  EXPECT_EQ(buffers.issue(FormCall{ConfigForm::kAllReduce, false, &good}, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("comm is NULL"), std::string::npos);
  // The communicator took no harm.
  EXPECT_EQ(runForm(FormCall{ConfigForm::kAllReduce, false, &good}, comm, 0, 1), "");
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// Inside a group: the refused calls return ncclInvalidArgument, the others run, and
// ncclGroupEnd succeeds (a bad ordinary argument, by contrast, fails the group).
TEST(CollConfig, RefusedConfigLeavesItsGroupWorking) {
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, 2, [](const RankContext& ctx) {
    FailureLog log;
    ncclCollConfig_t bogus = NCCL_COLLCONFIG_INITIALIZER;
    bogus.algSelection = "bogus";
    ncclCollConfig_t tooSmall = NCCL_COLLCONFIG_INITIALIZER;
    tooSmall.size = 8;
    const ncclCollConfig_t good = NCCL_COLLCONFIG_INITIALIZER;
    const FormCall calls[] = {{ConfigForm::kAllReduce, false, &bogus},   {ConfigForm::kAllReduce, true},
                              {ConfigForm::kAlltoAll, false, &tooSmall}, {ConfigForm::kBroadcast, false, &good},
                              {ConfigForm::kReduceScatter, true},        {ConfigForm::kAlltoAll, false, &good}};
    const bool refused[] = {true, false, true, false, false, false};
    std::vector<FormBuffers> buffers(std::size(calls));
    if (ncclGroupStart() != ncclSuccess) log.add("ncclGroupStart failed");
    for (size_t i = 0; i < std::size(calls); ++i) {
      buffers[i].prepare(calls[i], ctx.rank, ctx.nranks);
      const ncclResult_t r = buffers[i].issue(calls[i], ctx.comm);
      if (r != (refused[i] ? ncclInvalidArgument : ncclSuccess))
        log.add(calls[i].describe() + " in a group returned " + resultName(r));
    }
    const ncclResult_t end = ncclGroupEnd();
    if (end != ncclSuccess) log.add("ncclGroupEnd returned " + resultName(end));
    for (size_t i = 0; i < std::size(calls); ++i) {
      if (refused[i] && !buffers[i].receiveUntouched()) log.add(calls[i].describe() + " was refused yet ran");
      if (!refused[i])
        if (std::string failure = buffers[i].check(calls[i], ctx.rank, ctx.nranks); !failure.empty()) log.add(failure);
    }
    return log.outcome();
  }));
}

// Vendor options of a list, walked by nobody.
ncclConfigExt_t gSecondOption{nullptr, {77, 2}, {.s = "x"}};
ncclConfigExt_t gFirstOption{&gSecondOption, {77, 1}, {.i = 5}};

// A config of a newer, larger header: the bytes after Chorus' struct are not read.
struct NewerConfig {
  ncclCollConfig_t known = NCCL_COLLCONFIG_INITIALIZER;
  unsigned char newer[40];
};

size_t linesWith(const TuningLogCapture& capture, const std::string& text) {
  size_t n = 0;
  for (const std::string& line : capture.lines()) n += line.find(text) != std::string::npos;
  return n;
}

// Accepted whatever they hold, with correct results; each field Chorus cannot act on named
// in one INFO line per communicator however many calls carry it. A 2.31-sized struct's
// launchCompletionEvent (past its end) is never read.
TEST(CollConfig, HintsAreAcceptedAndNamedOncePerCommunicator) {
  ScopedEnv env;
  TuningLogCapture capture(env, "COLL");
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, 2, [](const RankContext& ctx) {
    FailureLog log;
    NewerConfig hints;
    hints.known.size = sizeof(NewerConfig);
    std::memset(hints.newer, 0xff, sizeof(hints.newer));
    ncclCollConfig_t& c = hints.known;
    c.minCTAs = 4;  // more than maxCTAs: a hint like the others
    c.maxCTAs = 2;
    c.nvlsCTAs = -4;
    c.cgaClusterSize = 100;
    c.CTAPolicy = NCCL_CTA_POLICY_ZERO;
    c.userProfilerTag = 0x8000000000000001ull;
    c.version = 99999;
    c.ext = &gFirstOption;
    ncclCollConfig_t older = NCCL_COLLCONFIG_INITIALIZER;
    older.size = offsetof(ncclCollConfig_t, launchCompletionEvent);
    older.launchCompletionEvent = reinterpret_cast<cudaEvent_t>(0x1);  // not part of this struct
    for (ConfigForm form : kAllConfigForms) {
      for (const ncclCollConfig_t* config : {&c, &older}) {
        if (std::string f = runForm(FormCall{form, false, config}, ctx.comm, ctx.rank, ctx.nranks); !f.empty())
          log.add(f);
      }
    }
    return log.outcome();
  }));
  for (const char* named :
       {"config->minCTAs = 4: no effect", "config->nvlsCTAs = -4: no effect", "config->cgaClusterSize = 100: no effect",
        "config->CTAPolicy = 2: no effect", "config->ext: vendor options"}) {
    EXPECT_EQ(linesWith(capture, named), 2u) << named << ": once on each rank's communicator";
  }
  EXPECT_EQ(linesWith(capture, "launchCompletionEvent"), 0u);
  EXPECT_EQ(linesWith(capture, "userProfilerTag"), 0u) << "the tag is a profiler plugin's (profiler_plugin_test.cc)";
  EXPECT_EQ(linesWith(capture, "WARN"), 0u);
}

// An event Chorus does not record yet: one WARN per communicator, not one per call.
TEST(CollConfig, LaunchCompletionEventIsWarnedOncePerCommunicator) {
  ScopedEnv env;
  TuningLogCapture capture(env, "COLL");
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, 2, [](const RankContext& ctx) {
    FailureLog log;
    ncclCollConfig_t withEvent = NCCL_COLLCONFIG_INITIALIZER;
    withEvent.launchCompletionEvent = reinterpret_cast<cudaEvent_t>(0x1);
    for (int i = 0; i < 3; ++i)
      if (std::string f = runForm(FormCall{ConfigForm::kAllReduce, false, &withEvent}, ctx.comm, ctx.rank, 2);
          !f.empty())
        log.add(f);
    return log.outcome();
  }));
  EXPECT_EQ(linesWith(capture, "WARN ncclAllReduceConfig: config->launchCompletionEvent"), 2u);
  EXPECT_EQ(linesWith(capture, "WARN"), 2u);
}

}  // namespace
}  // namespace chorus_test
