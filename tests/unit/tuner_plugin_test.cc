// External tuner plugins: NCCL_TUNER_PLUGIN lookup (none, unset, missing, no table, the net
// plugin's library), each ABI of the test plugin (tests/plugins/tuner_test_plugin.cc: v5,
// v6 to v3 with the newest winning, v4, v3) through init, getCollInfo and destroy, and how
// the Tuner follows the plugin: forced pairs, NCCL_ALGO / NCCL_PROTO and the call's own
// selection still binding, algorithms Chorus lacks ignored, channel bounds, v5 constants,
// and the WARNed fallbacks.
#include "src/tune/tuner_plugin.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/debug.h"
#include "socket_net_fixture.h"  // ScopedEnv
#include "src/tune/tuner.h"
#include "tests/harness/record_file.h"

namespace chorus {
namespace {

using socket_net_test::ScopedEnv;

constexpr const char* kPluginDir = CHORUS_TEST_TUNER_PLUGIN_DIR;
constexpr const char* kMarker = "tuner_plugin_test: no WARN since this";
constexpr uint32_t kRingOnly = 1u << static_cast<int>(Algorithm::Ring);

// Makes lastErrorText() a known marker, so a later WARN shows as a change.
void markLastError() { WARN("%s", kMarker); }

std::string pluginPath(const std::string& file) { return std::string(kPluginDir) + "/" + file; }

// The file the plugin records its calls in, for one test, and the rules it follows.
class PluginRecord : public chorus_test::RecordFile {
 public:
  explicit PluginRecord(const char* rules = "")
      : RecordFile("chorus_tuner_record"),
        record_("CHORUS_TEST_TUNER_RECORD", path().c_str()),
        rules_("CHORUS_TEST_TUNER_RULES", rules) {}

 private:
  ScopedEnv record_;
  ScopedEnv rules_;
};

TuneTopology topoOf(int nranks, int nChannels) {
  TuneTopology topo;
  topo.nranks = nranks;
  topo.nChannels = nChannels;
  return topo;
}

TunerPluginComm commOf(int nranks) {
  const std::vector<uint64_t> hosts(nranks, 7);  // one host
  const ncclUniqueId id{};
  return tunerPluginComm({&id, 1}, hosts);
}

std::unique_ptr<TunerPlugin> openPlugin(const std::optional<std::string>& setting, int nranks = 4,
                                        TuneConstants* constants = nullptr,
                                        const std::optional<std::string>& netPlugin = "none") {
  TuneConstants scratch;
  return TunerPlugin::open(TunerPluginSettings{setting, netPlugin}, commOf(nranks), TuneTopology{}.hopLatencyUs,
                           constants != nullptr ? constants : &scratch);
}

// A tuner of 4 ranks and 2 channels with the plugin `setting` names attached (when it loads).
Tuner tunerWith(const std::string& setting, const std::string& algo = "", const std::string& proto = "") {
  Tuner tuner(topoOf(4, 2), algo, proto);
  TuneConstants constants = tuner.constants();
  std::unique_ptr<TunerPlugin> plugin =
      TunerPlugin::open(TunerPluginSettings{setting, "none"}, commOf(4), tuner.topology().hopLatencyUs, &constants);
  if (plugin != nullptr) {
    tuner.setConstants(constants);
    tuner.attachPlugin(std::move(plugin));
  }
  return tuner;
}

void expectSameChoice(const TuneChoice& got, const TuneChoice& want, const char* what) {
  EXPECT_EQ(got.algo, want.algo) << what;
  EXPECT_EQ(got.proto, want.proto) << what;
  EXPECT_DOUBLE_EQ(got.timeUs, want.timeUs) << what;
  EXPECT_EQ(got.maxChannels, 0) << what;
}

TEST(TunerPluginLoad, NoneLoadsNothingAndWarnsNothing) {
  PluginRecord record;
  markLastError();
  EXPECT_EQ(openPlugin("none"), nullptr);
  EXPECT_EQ(openPlugin("NONE"), nullptr);
  EXPECT_STREQ(lastErrorText(), kMarker);
  EXPECT_TRUE(record.lines("init").empty());
}

TEST(TunerPluginLoad, UnsetTriesTheDefaultLibraryWithoutWarning) {
  markLastError();
  std::unique_ptr<TunerPlugin> plugin = openPlugin(std::nullopt);
  if (plugin != nullptr) GTEST_SKIP() << "a libnccl-tuner.so is installed on this machine";
  EXPECT_STREQ(lastErrorText(), kMarker) << "a missing default plugin is not worth a WARN";
}

TEST(TunerPluginLoad, MissingNamedPluginWarnsWithTheFilesAndDlerrorOnce) {
  markLastError();
  EXPECT_EQ(openPlugin("no_such_tuner_zz"), nullptr);
  const std::string warning = lastErrorText();
  EXPECT_NE(warning.find("libnccl-tuner-no_such_tuner_zz.so"), std::string::npos) << warning;
  EXPECT_NE(warning.find("cannot open shared object file"), std::string::npos) << "dlerror() missing: " << warning;
  markLastError();
  EXPECT_EQ(openPlugin("no_such_tuner_zz"), nullptr);
  EXPECT_STREQ(lastErrorText(), kMarker) << "the same setting is not tried (nor WARNed) again";
}

TEST(TunerPluginLoad, MissingPathWarnsWithThePath) {
  markLastError();
  EXPECT_EQ(openPlugin("/no/such/dir/libnccl-tuner-gone.so"), nullptr);
  const std::string warning = lastErrorText();
  EXPECT_NE(warning.find("/no/such/dir/libnccl-tuner-gone.so"), std::string::npos) << warning;
  EXPECT_EQ(warning.find("libnccl-tuner-/no"), std::string::npos) << "a path is not a name: " << warning;
}

TEST(TunerPluginLoad, LibraryWithoutATunerTableIsRefused) {
  markLastError();
  EXPECT_EQ(openPlugin("libm.so.6"), nullptr);  // loads fine, exports no ncclTunerPlugin_v*
  const std::string warning = lastErrorText();
  EXPECT_NE(warning.find("libm.so.6"), std::string::npos) << warning;
  EXPECT_NE(warning.find("ncclTunerPlugin_v5"), std::string::npos) << warning;
  EXPECT_NE(warning.find("ncclTunerPlugin_v3"), std::string::npos) << warning;
}

TEST(TunerPluginLoad, FailedInitWarnsWithTheResultAndLeavesNoPlugin) {
  PluginRecord record("fail=init");
  markLastError();
  EXPECT_EQ(openPlugin(pluginPath("libnccl-tuner-chorustest4.so")), nullptr);
  const std::string warning = lastErrorText();
  EXPECT_NE(warning.find("chorustest-v4"), std::string::npos) << warning;
  EXPECT_NE(warning.find("libnccl-tuner-chorustest4.so"), std::string::npos) << warning;
  EXPECT_NE(warning.find("init failed"), std::string::npos) << warning;
  EXPECT_NE(warning.find("(3)"), std::string::npos) << "ncclInternalError's code: " << warning;
  EXPECT_TRUE(record.lines("destroy").empty()) << "no destroy without an init";
}

TEST(TunerPluginLoad, TheNetPluginsLibraryIsSearchedWhenUnset) {
  PluginRecord record;
  markLastError();
  std::unique_ptr<TunerPlugin> plugin = openPlugin(std::nullopt, 4, nullptr, pluginPath("libnccl-tuner-chorustest.so"));
  ASSERT_NE(plugin, nullptr) << lastErrorText();
  if (plugin->name() != "chorustest-v5") GTEST_SKIP() << "a libnccl-tuner.so is installed: " << plugin->path();
  EXPECT_STREQ(lastErrorText(), kMarker);
  plugin.reset();
  EXPECT_EQ(record.lines("init").size(), 1u);
  EXPECT_EQ(record.lines("destroy").size(), 1u);
}

struct AbiCase {
  const char* setting;  // NCCL_TUNER_PLUGIN: a name, or "" for the full path of `file`
  const char* file;
  int version;
};

void PrintTo(const AbiCase& c, std::ostream* out) { *out << c.file << " v" << c.version; }

class TunerPluginAbiTest : public testing::TestWithParam<AbiCase> {
 protected:
  std::string setting() const {
    return GetParam().setting[0] != '\0' ? std::string(GetParam().setting) : pluginPath(GetParam().file);
  }
};

TEST_P(TunerPluginAbiTest, LoadsTheNewestTableAndInitsAndDestroysOnce) {
  PluginRecord record;
  std::unique_ptr<TunerPlugin> plugin = openPlugin(setting(), 3);
  ASSERT_NE(plugin, nullptr) << lastErrorText();
  EXPECT_EQ(plugin->version(), GetParam().version);
  EXPECT_EQ(plugin->name(), "chorustest-v" + std::to_string(GetParam().version));
  EXPECT_NE(plugin->path().find(GetParam().file), std::string::npos) << plugin->path();
  std::vector<std::string> inits = record.lines("init");
  ASSERT_EQ(inits.size(), 1u);
  EXPECT_NE(inits[0].find("init v" + std::to_string(GetParam().version) + " "), std::string::npos) << inits[0];
  EXPECT_NE(inits[0].find(" nRanks 3 nNodes 1"), std::string::npos) << inits[0];
  if (GetParam().version >= 5) {
    EXPECT_NE(inits[0].find(" domains 1/3/3"), std::string::npos) << "one NVLink domain per host: " << inits[0];
    const TuneConstants defaults;
    char ringSimple[64];
    snprintf(ringSimple, sizeof(ringSimple), " ringSimple %g/%g", defaults.baseLatencyUs[1][2],
             TuneTopology{}.hopLatencyUs * defaults.hopLatencyFactor[2]);
    EXPECT_NE(inits[0].find(ringSimple), std::string::npos) << "Chorus' constants in NCCL's layout: " << inits[0];
  }
  EXPECT_TRUE(record.lines("destroy").empty());
  plugin.reset();
  std::vector<std::string> destroys = record.lines("destroy");
  ASSERT_EQ(destroys.size(), 1u);
  const std::string ctx = inits[0].substr(inits[0].find(" ctx "), inits[0].find(" nRanks") - inits[0].find(" ctx "));
  EXPECT_NE(destroys[0].find(ctx), std::string::npos) << "destroy gets init's context: " << destroys[0];
}

TEST_P(TunerPluginAbiTest, ForcedPairWinsForTheSizesItCovers) {
  PluginRecord record("force=tree/ll/65536");
  Tuner tuner = tunerWith(setting());
  ASSERT_NE(tuner.plugin(), nullptr) << lastErrorText();
  const Tuner own(topoOf(4, 2), "", "");

  const TuneChoice small = tuner.choose(CollKind::AllReduce, 4096);
  EXPECT_EQ(small.algo, Algorithm::Tree);
  EXPECT_EQ(small.proto, Protocol::LL);
  EXPECT_EQ(small.timeUs, 0.0) << "the plugin's time is the estimate";
  const TuneChoice edge = tuner.choose(CollKind::AllReduce, 65536);
  EXPECT_EQ(edge.algo, Algorithm::Tree);
  EXPECT_EQ(edge.proto, Protocol::LL);
  expectSameChoice(tuner.choose(CollKind::AllReduce, 65537), own.choose(CollKind::AllReduce, 65537), "65537 bytes");
  expectSameChoice(tuner.choose(CollKind::AllGather, 4096), own.choose(CollKind::AllGather, 4096), "AllGather");

  // What Chorus offered: all six pairs for AllReduce, Ring alone for AllGather.
  std::vector<std::string> colls = record.lines("coll");
  ASSERT_EQ(colls.size(), 4u);
  EXPECT_NE(colls[0].find(" func 4 bytes 4096 offered tree/ll;tree/ll128;tree/simple;ring/ll;ring/ll128;ring/simple "),
            std::string::npos)
      << colls[0];
  EXPECT_NE(colls[3].find(" func 2 bytes 4096 offered ring/ll;ring/ll128;ring/simple "), std::string::npos) << colls[3];
  EXPECT_NE(colls[3].find(" channels 0"), std::string::npos) << "nChannels starts at 0: " << colls[3];
}

TEST_P(TunerPluginAbiTest, DisablingEverythingFallsBackWithOneWarn) {
  PluginRecord record("disable=all");
  Tuner tuner = tunerWith(setting());
  ASSERT_NE(tuner.plugin(), nullptr) << lastErrorText();
  const Tuner own(topoOf(4, 2), "", "");
  markLastError();
  expectSameChoice(tuner.choose(CollKind::AllReduce, 4096), own.choose(CollKind::AllReduce, 4096), "first");
  const std::string warning = lastErrorText();
  EXPECT_NE(warning.find("disabled every algorithm"), std::string::npos) << warning;
  EXPECT_NE(warning.find("chorustest-v"), std::string::npos) << warning;
  markLastError();
  expectSameChoice(tuner.choose(CollKind::Broadcast, 100), own.choose(CollKind::Broadcast, 100), "second");
  EXPECT_STREQ(lastErrorText(), kMarker) << "one WARN per communicator";
  EXPECT_EQ(record.lines("coll").size(), 2u) << "the plugin is asked every call";
}

INSTANTIATE_TEST_SUITE_P(Abi, TunerPluginAbiTest,
                         testing::Values(AbiCase{"chorustest", "libnccl-tuner-chorustest.so", 5},
                                         AbiCase{"", "libnccl-tuner-chorustest.so", 5},
                                         AbiCase{"chorustest6", "libnccl-tuner-chorustest6.so", 6},
                                         AbiCase{"libnccl-tuner-chorustest4.so", "libnccl-tuner-chorustest4.so", 4},
                                         AbiCase{"", "libnccl-tuner-chorustest3.so", 3}),
                         [](const testing::TestParamInfo<AbiCase>& info) {
                           return std::string(info.param.setting[0] != '\0' ? "name" : "path") + "_v" +
                                  std::to_string(info.param.version);
                         });

TEST(TunerPluginChoice, SettingsAndTheCallStillBind) {
  PluginRecord record("force=tree/ll/65536");
  const Tuner ringOnly = tunerWith("chorustest", "Ring");
  ASSERT_NE(ringOnly.plugin(), nullptr) << lastErrorText();
  EXPECT_EQ(ringOnly.choose(CollKind::AllReduce, 4096).algo, Algorithm::Ring) << "NCCL_ALGO=Ring";

  const Tuner noLL = tunerWith("chorustest", "", "^LL");
  EXPECT_NE(noLL.choose(CollKind::AllReduce, 4096).proto, Protocol::LL) << "NCCL_PROTO=^LL";

  const Tuner any = tunerWith("chorustest");
  CallTuning call;
  call.algos = kRingOnly;  // the call's ncclCollConfig_t allows Ring only
  EXPECT_EQ(any.choose(CollKind::AllReduce, 4096, call).algo, Algorithm::Ring);

  std::vector<std::string> colls = record.lines("coll");
  ASSERT_EQ(colls.size(), 3u);
  EXPECT_NE(colls[0].find(" offered ring/ll;ring/ll128;ring/simple "), std::string::npos) << colls[0];
  EXPECT_NE(colls[1].find(" offered tree/ll128;tree/simple;ring/ll128;ring/simple "), std::string::npos) << colls[1];
  EXPECT_NE(colls[2].find(" offered ring/ll;ring/ll128;ring/simple "), std::string::npos) << colls[2];
}

TEST(TunerPluginChoice, AlgorithmsChorusLacksAreIgnored) {
  PluginRecord record("foreign");
  const Tuner tuner = tunerWith("chorustest");
  ASSERT_NE(tuner.plugin(), nullptr) << lastErrorText();
  const Tuner own(topoOf(4, 2), "", "");
  markLastError();
  for (size_t bytes : {size_t(8), size_t(1) << 20}) {
    expectSameChoice(tuner.choose(CollKind::AllReduce, bytes), own.choose(CollKind::AllReduce, bytes),
                     std::to_string(bytes).c_str());
  }
  EXPECT_STREQ(lastErrorText(), kMarker) << "NVLS and PAT entries are simply not Chorus' to run";
}

TEST(TunerPluginChoice, APairThatWasNotOfferedCannotBeEnabled) {
  PluginRecord record("enable=tree/ll");  // changes no offered pair but AllReduce's Tree/LL
  const Tuner tuner = tunerWith("chorustest");
  const Tuner ringOnly = tunerWith("chorustest", "Ring");
  ASSERT_NE(tuner.plugin(), nullptr) << lastErrorText();
  EXPECT_EQ(tuner.choose(CollKind::AllReduce, 4096).algo, Algorithm::Tree) << "offered, so enabled";
  const Tuner own(topoOf(4, 2), "", "");
  for (CollKind coll : {CollKind::AllGather, CollKind::ReduceScatter, CollKind::Broadcast, CollKind::Reduce}) {
    expectSameChoice(tuner.choose(coll, 4096), own.choose(coll, 4096), collName(coll));  // Chorus has no such tree
  }
  const Tuner ownRing(topoOf(4, 2), "Ring", "");
  expectSameChoice(ringOnly.choose(CollKind::AllReduce, 4096), ownRing.choose(CollKind::AllReduce, 4096),
                   "NCCL_ALGO=Ring");
}

TEST(TunerPluginChoice, ReweightedCostsPickAmongTheOfferedPairsWithThePluginsTimes) {
  PluginRecord record("scale=3,enable=tree/ll");  // every offered cost changes, and Tree/LL is 0
  const Tuner tuner = tunerWith("chorustest");
  ASSERT_NE(tuner.plugin(), nullptr) << lastErrorText();
  const Tuner own(topoOf(4, 2), "", "");
  for (CollKind coll : {CollKind::AllGather, CollKind::Broadcast}) {
    const TuneChoice got = tuner.choose(coll, 1 << 20);
    const TuneChoice want = own.choose(coll, 1 << 20);
    EXPECT_EQ(got.algo, Algorithm::Ring) << collName(coll) << ": Tree was not offered";
    EXPECT_EQ(got.proto, want.proto) << collName(coll);
    EXPECT_NEAR(got.timeUs, 3 * want.timeUs, 1e-5 * want.timeUs) << collName(coll) << ": the plugin's time";
  }
  const TuneChoice allReduce = tuner.choose(CollKind::AllReduce, 1 << 20);
  EXPECT_EQ(allReduce.algo, Algorithm::Tree);
  EXPECT_EQ(allReduce.proto, Protocol::LL);
}

TEST(TunerPluginChoice, ChannelsBoundTheCall) {
  PluginRecord record("channels=1");
  const Tuner tuner = tunerWith("chorustest");
  ASSERT_NE(tuner.plugin(), nullptr) << lastErrorText();
  EXPECT_EQ(tuner.choose(CollKind::AllReduce, 1 << 20).maxChannels, 1);
  EXPECT_EQ(tuner.choose(CollKind::AllGather, 1 << 20).maxChannels, 1);
}

TEST(TunerPluginChoice, SendRecvIsNotShownToThePlugin) {
  PluginRecord record("disable=all");
  const Tuner tuner = tunerWith("chorustest");
  ASSERT_NE(tuner.plugin(), nullptr) << lastErrorText();
  markLastError();
  EXPECT_EQ(tuner.choose(CollKind::SendRecv, 4096).algo, Algorithm::Ring);
  EXPECT_TRUE(record.lines("coll").empty());
  EXPECT_STREQ(lastErrorText(), kMarker);
}

TEST(TunerPluginChoice, FailedGetCollInfoFallsBackWithOneWarn) {
  PluginRecord record("fail=getCollInfo");
  const Tuner tuner = tunerWith("chorustest");
  ASSERT_NE(tuner.plugin(), nullptr) << lastErrorText();
  const Tuner own(topoOf(4, 2), "", "");
  markLastError();
  expectSameChoice(tuner.choose(CollKind::AllReduce, 4096), own.choose(CollKind::AllReduce, 4096), "first");
  const std::string warning = lastErrorText();
  EXPECT_NE(warning.find("getCollInfo failed"), std::string::npos) << warning;
  markLastError();
  expectSameChoice(tuner.choose(CollKind::AllReduce, 4096), own.choose(CollKind::AllReduce, 4096), "second");
  EXPECT_STREQ(lastErrorText(), kMarker) << "one WARN per communicator";
}

TEST(TunerPluginChoice, V5ConstantsMoveTheModelAndV4CannotTouchThem) {
  PluginRecord record("latency=tree/5000");
  TuneConstants constants;
  std::unique_ptr<TunerPlugin> v5 = openPlugin("chorustest", 4, &constants);
  ASSERT_NE(v5, nullptr) << lastErrorText();
  for (double us : constants.baseLatencyUs[static_cast<int>(Algorithm::Tree)]) EXPECT_EQ(us, 5000.0);
  EXPECT_EQ(constants.baseLatencyUs[static_cast<int>(Algorithm::Ring)][2], TuneConstants{}.baseLatencyUs[1][2]);

  Tuner tuner = tunerWith("chorustest");
  EXPECT_EQ(tuner.constants().baseLatencyUs[static_cast<int>(Algorithm::Tree)][0], 5000.0);
  EXPECT_EQ(tuner.choose(CollKind::AllReduce, 8).algo, Algorithm::Ring) << "Tree's 5 ms base latency";

  TuneConstants untouched;
  std::unique_ptr<TunerPlugin> v4 = openPlugin("chorustest4", 4, &untouched);
  ASSERT_NE(v4, nullptr) << lastErrorText();
  EXPECT_EQ(untouched.baseLatencyUs[0][0], TuneConstants{}.baseLatencyUs[0][0]);
}

TEST(TunerPluginChoice, ATunerWithoutAPluginAsksNothing) {
  PluginRecord record("disable=all");
  const Tuner none = tunerWith("none");
  EXPECT_EQ(none.plugin(), nullptr);
  none.choose(CollKind::AllReduce, 4096);
  EXPECT_TRUE(record.lines("coll").empty());
}

TEST(TunerPluginComm, IdAndNodesAreTheSameOnEveryRank) {
  ncclUniqueId a{};
  ncclUniqueId b{};
  b.internal[5] = 1;
  const std::vector<uint64_t> hosts = {1, 1, 2, 2, 2};
  const TunerPluginComm first = tunerPluginComm({&a, 1}, hosts);
  EXPECT_EQ(first.commId, tunerPluginComm({&a, 1}, hosts).commId);
  EXPECT_NE(first.commId, tunerPluginComm({&b, 1}, hosts).commId);
  EXPECT_EQ(first.nranks, 5);
  EXPECT_EQ(first.nNodes, 2);
  EXPECT_EQ(first.minRanksPerNode, 2);
  EXPECT_EQ(first.maxRanksPerNode, 3);
}

}  // namespace
}  // namespace chorus
