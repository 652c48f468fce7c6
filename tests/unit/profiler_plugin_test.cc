// Profiler plugin loading and calling (src/profiler/profiler_plugin.h): NCCL_PROFILER_PLUGIN
// lookup (none, unset, a missing name, a library without a table, a name found through the
// program's RUNPATH, a path), the table taken (v7 before v4; v6; v5; v4), what each version is
// given (a v4 table no API events, and a coll's parent is its group event there; the user
// tag only v7), and the
// process's shared plugin (one load while held; a failed setting not retried, nor WARNed twice).
#include "src/profiler/profiler_plugin.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/debug.h"
#include "socket_net_fixture.h"  // ScopedEnv

namespace chorus {
namespace {

using socket_net_test::ScopedEnv;

constexpr const char* kPluginDir = CHORUS_TEST_PROFILER_PLUGIN_DIR;
constexpr const char* kMarker = "profiler_plugin_test: no WARN since this";

void markLastError() { WARN("%s", kMarker); }
std::string pluginPath(const char* file) { return std::string(kPluginDir) + "/" + file; }

TEST(ProfilerPluginLoad, NoneLoadsNothingAndWarnsNothing) {
  markLastError();
  EXPECT_EQ(loadProfilerPlugin("none"), nullptr);
  EXPECT_EQ(loadProfilerPlugin("NONE"), nullptr);
  EXPECT_STREQ(lastErrorText(), kMarker);
}

TEST(ProfilerPluginLoad, UnsetTriesTheDefaultLibraryWithoutWarning) {
  markLastError();
  if (loadProfilerPlugin(nullptr) != nullptr) GTEST_SKIP() << "a libnccl-profiler.so is installed on this machine";
  EXPECT_STREQ(lastErrorText(), kMarker) << "a missing default plugin is not worth a WARN";
}

TEST(ProfilerPluginLoad, MissingNameWarnsWithBothFilesTried) {
  markLastError();
  EXPECT_EQ(loadProfilerPlugin("no_such_profiler_zz"), nullptr);
  const std::string warning = lastErrorText();
  EXPECT_NE(warning.find("libnccl-profiler-no_such_profiler_zz.so"), std::string::npos) << warning;
  EXPECT_NE(warning.find("cannot open shared object file"), std::string::npos) << "dlerror() missing: " << warning;
}

TEST(ProfilerPluginLoad, LibraryWithoutATableIsRefused) {
  markLastError();
  EXPECT_EQ(loadProfilerPlugin("libm.so.6"), nullptr);  // loads fine, exports no ncclProfiler_v*
  const std::string warning = lastErrorText();
  EXPECT_NE(warning.find("libm.so.6"), std::string::npos) << warning;
  EXPECT_NE(warning.find("ncclProfiler_v7"), std::string::npos) << warning;
  EXPECT_NE(warning.find("ncclProfiler_v4"), std::string::npos) << warning;
}

struct TableCase {
  std::string setting;
  const char* name;  // the table's
  int version;
};

class ProfilerPluginTableTest : public testing::TestWithParam<TableCase> {};

TEST_P(ProfilerPluginTableTest, TakesTheNewestTable) {
  std::shared_ptr<ProfilerPlugin> plugin = loadProfilerPlugin(GetParam().setting.c_str());
  ASSERT_NE(plugin, nullptr) << lastErrorText();
  EXPECT_EQ(plugin->name(), GetParam().name);
  EXPECT_EQ(plugin->version(), GetParam().version);
}

INSTANTIATE_TEST_SUITE_P(Tables, ProfilerPluginTableTest,
                         testing::Values(TableCase{"chorustest", "chorustest-v7", 7},  // by name: exports v7 and v4
                                         TableCase{pluginPath("libnccl-profiler-chorustest.so"), "chorustest-v7", 7},
                                         TableCase{pluginPath("libnccl-profiler-chorustest6.so"), "chorustest-v6", 6},
                                         TableCase{pluginPath("libnccl-profiler-chorustest5.so"), "chorustest-v5", 5},
                                         TableCase{"chorustest4", "chorustest-v4", 4}),
                         [](const testing::TestParamInfo<TableCase>& info) {
                           std::string name = info.param.setting.find('/') == std::string::npos ? "ByNameV" : "ByPathV";
                           name += std::to_string(info.param.version);
                           return name;
                         });

// The plugin's lines for one scenario: a group event, a CollApi event, then a coll event
// whose CollApi event and group are given, as the runtime describes them (v6's terms).
class ProfilerPluginCallTest : public testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/chorus-profiler-unit-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    directory_ = pattern;
    file_ = directory_ + "/events";
  }
  void TearDown() override {
    unlink(file_.c_str());
    rmdir(directory_.c_str());
  }

  std::vector<std::string> run(const char* library) {
    unlink(file_.c_str());  // the plugin appends
    ScopedEnv output("CHORUS_TEST_PROFILER_FILE", file_.c_str());
    ScopedEnv mask("CHORUS_TEST_PROFILER_MASK", "0x7");
    std::shared_ptr<ProfilerPlugin> plugin = loadProfilerPlugin(pluginPath(library).c_str());
    EXPECT_NE(plugin, nullptr) << lastErrorText();
    if (plugin == nullptr) return {};
    void* context = nullptr;
    EXPECT_EQ(plugin->init(&context, 0x1234, "unit", 1, 2, 1), ncclSuccess);
    EXPECT_EQ(plugin->activationMask(), 0x7);
    ncclProfilerEventDescr_v7_t group{};
    group.type = ncclProfileGroup;
    group.rank = 1;
    void* groupHandle = nullptr;
    plugin->startEvent(context, &groupHandle, group);
    EXPECT_NE(groupHandle, nullptr);
    ncclProfilerEventDescr_v7_t api{};
    api.type = ncclProfileCollApi;
    api.rank = 1;
    api.collApi = ncclProfilerCollApiDescr_v7_t{"AllReduce", 5, "ncclInt8", 0, nullptr, false, 0xfeed};
    void* apiHandle = nullptr;
    plugin->startEvent(context, &apiHandle, api);
    plugin->stopEvent(apiHandle);
    ncclProfilerEventDescr_v7_t coll{};
    coll.type = ncclProfileColl;
    coll.parentObj = apiHandle;
    coll.rank = 1;
    coll.coll.seqNumber = 3;
    coll.coll.func = "AllReduce";
    coll.coll.count = 5;
    coll.coll.datatype = "ncclInt8";
    coll.coll.nChannels = 2;
    coll.coll.algo = "RING";
    coll.coll.proto = "LL";
    coll.coll.parentGroup = groupHandle;
    coll.coll.userTag = 0xfeed;
    void* collHandle = nullptr;
    plugin->startEvent(context, &collHandle, coll);
    plugin->stopEvent(collHandle);
    plugin->stopEvent(groupHandle);
    plugin->finalize(context);
    plugin.reset();
    std::vector<std::string> lines;
    std::ifstream in(file_);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  std::string directory_;
  std::string file_;
};

// The value of `key` in one of the plugin's lines ("" when absent).
std::string field(const std::string& line, const std::string& key) {
  const size_t at = line.find(" " + key + "=");
  if (at == std::string::npos) return "";
  const size_t begin = at + key.size() + 2;
  return line.substr(begin, line.find(' ', begin) - begin);
}

bool contains(const std::string& line, const std::string& part) { return line.find(part) != std::string::npos; }

TEST_F(ProfilerPluginCallTest, V4GetsTheGroupAsParentAndNoApiEvents) {
  const std::vector<std::string> lines = run("libnccl-profiler-chorustest4.so");
  // init, group start, coll start and stop, group stop, finalize: the CollApi event is not given.
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_TRUE(contains(lines[0], "version=4 commName=unit commHash=0x1234 nNodes=1 nranks=2 rank=1")) << lines[0];
  EXPECT_TRUE(contains(lines[1], " type=1 parent=0 rank=1")) << lines[1];
  const std::string group = field(lines[1], "id");
  EXPECT_TRUE(contains(lines[2], " type=2 parent=" + group +
                                     " rank=1 func=AllReduce count=5 datatype=ncclInt8 root=0 seq=3 algo=RING "
                                     "proto=LL nChannels=2"))
      << lines[2];
}

TEST_F(ProfilerPluginCallTest, V5GetsTheApiEventAsParentAndTheGroupAsParentGroup) {
  const std::vector<std::string> lines = run("libnccl-profiler-chorustest5.so");
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_TRUE(contains(lines[0], "version=5 commName=unit commHash=0x1234")) << lines[0];
  const std::string group = field(lines[1], "id");
  EXPECT_TRUE(contains(lines[2], " type=512 parent=0 rank=1 func=AllReduce count=5 datatype=ncclInt8")) << lines[2];
  const std::string api = field(lines[2], "id");
  EXPECT_TRUE(contains(lines[4], " type=2 parent=" + api + " parentGroup=" + group + " rank=1 func=AllReduce"))
      << lines[4];
}

TEST_F(ProfilerPluginCallTest, V7GetsTheUserTagAndV6DoesNot) {
  const std::vector<std::string> v7 = run("libnccl-profiler-chorustest.so");
  ASSERT_EQ(v7.size(), 8u);
  EXPECT_TRUE(contains(v7[0], "version=7")) << v7[0];
  EXPECT_TRUE(contains(v7[2], " type=512 ") && contains(v7[2], " userTag=0xfeed")) << v7[2];
  EXPECT_TRUE(contains(v7[4], " kernelVariant=(null) isSymColl=0 userTag=0xfeed")) << v7[4];
  const std::vector<std::string> v6 = run("libnccl-profiler-chorustest6.so");
  ASSERT_EQ(v6.size(), 8u);
  EXPECT_TRUE(contains(v6[0], "version=6")) << v6[0];
  EXPECT_FALSE(contains(v6[2], "userTag") || contains(v6[4], "userTag")) << v6[2] << "\n" << v6[4];
  EXPECT_TRUE(contains(v6[4], " parentGroup=" + field(v6[1], "id"))) << v6[4];
}

TEST(ProfilerPluginShared, OneLoadWhileHeldAndAFailedSettingNotRetried) {
  {
    ScopedEnv setting("NCCL_PROFILER_PLUGIN", pluginPath("libnccl-profiler-chorustest.so").c_str());
    std::shared_ptr<ProfilerPlugin> first = sharedProfilerPlugin();
    ASSERT_NE(first, nullptr) << lastErrorText();
    EXPECT_EQ(sharedProfilerPlugin(), first);
  }
  {
    ScopedEnv setting("NCCL_PROFILER_PLUGIN", "/nonexistent/shared/libnccl-profiler-zz.so");
    markLastError();
    EXPECT_EQ(sharedProfilerPlugin(), nullptr);
    EXPECT_NE(std::string(lastErrorText()).find("/nonexistent/shared/libnccl-profiler-zz.so"), std::string::npos);
    markLastError();
    EXPECT_EQ(sharedProfilerPlugin(), nullptr);
    EXPECT_STREQ(lastErrorText(), kMarker) << "the failure is said once";
  }
  ScopedEnv setting("NCCL_PROFILER_PLUGIN", "chorustest5");
  std::shared_ptr<ProfilerPlugin> other = sharedProfilerPlugin();
  ASSERT_NE(other, nullptr) << "a changed setting is tried: " << lastErrorText();
  EXPECT_EQ(other->version(), 5);
}

}  // namespace
}  // namespace chorus
