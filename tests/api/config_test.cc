// ncclConfig_t field by field: a value out of range is refused with ncclInvalidArgument
// and a WARN naming the field; minCTAs/maxCTAs bound the channels; a field that has no
// effect here gets one INFO line naming it, one that is not honoured yet a WARN; structs
// of newer headers (larger, with more fields) are accepted and their fields named.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "harness/tuning_log.h"
#include "nccl.h"

namespace chorus_test {
namespace {

// One single-rank communicator with `config`; destroyed at once when it was made.
ncclResult_t initWith(ncclConfig_t* config) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return ncclInternalError;
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, 1, id, 0, config);
  if (comm != nullptr) ncclCommDestroy(comm);
  return r;
}

bool logHas(const TuningLogCapture& log, const std::string& text) {
  for (const std::string& line : log.lines())
    if (line.find(text) != std::string::npos) return true;
  return false;
}

struct BadValue {
  const char* field;
  size_t offset;
  int value;
};

TEST(Config, ValuesOutOfRangeAreRefusedNamingTheField) {
  const BadValue cases[] = {
      {"blocking", offsetof(ncclConfig_t, blocking), 2},
      {"cgaClusterSize", offsetof(ncclConfig_t, cgaClusterSize), 9},
      {"minCTAs", offsetof(ncclConfig_t, minCTAs), 0},
      {"maxCTAs", offsetof(ncclConfig_t, maxCTAs), -5},
      {"splitShare", offsetof(ncclConfig_t, splitShare), 3},
      {"trafficClass", offsetof(ncclConfig_t, trafficClass), 300},
      {"collnetEnable", offsetof(ncclConfig_t, collnetEnable), 2},
      {"CTAPolicy", offsetof(ncclConfig_t, CTAPolicy), 7},
      {"shrinkShare", offsetof(ncclConfig_t, shrinkShare), -2},
      {"nvlsCTAs", offsetof(ncclConfig_t, nvlsCTAs), -1},
      {"nChannelsPerNetPeer", offsetof(ncclConfig_t, nChannelsPerNetPeer), 0},
      {"nvlinkCentricSched", offsetof(ncclConfig_t, nvlinkCentricSched), 5},
  };
  for (const BadValue& c : cases) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    memcpy(reinterpret_cast<char*>(&config) + c.offset, &c.value, sizeof(int));
    EXPECT_EQ(initWith(&config), ncclInvalidArgument) << c.field << " = " << c.value;
    const std::string error = ncclGetLastError(nullptr);
    EXPECT_NE(error.find(std::string("config->") + c.field + " is " + std::to_string(c.value)), std::string::npos)
        << c.field << ": " << error;
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.minCTAs = 4;
  config.maxCTAs = 2;
  EXPECT_EQ(initWith(&config), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("minCTAs 4 is larger than config->maxCTAs 2"),
            std::string::npos);
}

TEST(Config, MinAndMaxCtasBoundTheChannels) {
  ScopedEnv env;
  TuningLogCapture log(env, "INIT");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.maxCTAs = 1;
  ASSERT_EQ(initWith(&config), ncclSuccess);
  EXPECT_TRUE(logHas(log, "nChannels 1 ")) << "maxCTAs 1";
  log.clear();
  ncclResetDebugInit();  // reopens the log file clear() removed
  config = NCCL_CONFIG_INITIALIZER;
  config.minCTAs = 5;
  config.maxCTAs = 5;
  config.commName = "five-channels";
  ASSERT_EQ(initWith(&config), ncclSuccess);
  EXPECT_TRUE(logHas(log, "commName five-channels rank 0 nRanks 1 nChannels 5 ")) << "minCTAs = maxCTAs = 5";
}

TEST(Config, FieldsWithoutEffectAreNamedOnce) {
  ScopedEnv env;
  TuningLogCapture log(env, "INIT");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.cgaClusterSize = 2;
  config.splitShare = 1;
  config.trafficClass = 106;
  config.netName = "Socket";
  ASSERT_EQ(initWith(&config), ncclSuccess);
  EXPECT_TRUE(logHas(log, "INFO ncclCommInitRankConfig: config->cgaClusterSize = 2: no effect"));
  // Honoured (tests/api/net_config_test.cc, tests/api/shared_connections_test.cc): nothing
  // to say about them.
  EXPECT_FALSE(logHas(log, "config->splitShare"));
  EXPECT_FALSE(logHas(log, "config->trafficClass"));
  EXPECT_FALSE(logHas(log, "config->netName"));
  log.clear();
  ncclResetDebugInit();              // reopens the log file clear() removed
  config = NCCL_CONFIG_INITIALIZER;  // nothing set: nothing said
  ASSERT_EQ(initWith(&config), ncclSuccess);
  EXPECT_FALSE(logHas(log, "config->"));
}

// A thread's lines name the communicator it last made; a new communicator's config lines
// are about the new one and must not carry the last one's name.
TEST(Config, ANewCommunicatorsLinesDoNotNameTheLastOne) {
  ScopedEnv env;
  TuningLogCapture log(env, "INIT");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.commName = "the-last-one";
  ASSERT_EQ(initWith(&config), ncclSuccess);
  config = NCCL_CONFIG_INITIALIZER;
  config.cgaClusterSize = 2;
  ASSERT_EQ(initWith(&config), ncclSuccess);
  EXPECT_TRUE(logHas(log, "INFO ncclCommInitRankConfig: config->cgaClusterSize = 2: no effect"));
  EXPECT_FALSE(logHas(log, "the-last-one\": ncclCommInitRankConfig: config->cgaClusterSize"));
}

// A struct from a newer header: larger, with fields after nvlinkCentricSched.
TEST(Config, NewerLargerStructsAreAcceptedAndTheirFieldsNamed) {
  ScopedEnv env;
  TuningLogCapture log(env, "INIT");
  std::vector<char> bytes(sizeof(ncclConfig_t) + 9 * sizeof(int));
  ncclConfig_t base = NCCL_CONFIG_INITIALIZER;
  memcpy(bytes.data(), &base, sizeof(base));
  const int undef = NCCL_CONFIG_UNDEF_INT;
  for (int i = 0; i < 9; ++i) memcpy(bytes.data() + sizeof(base) + i * sizeof(int), &undef, sizeof(int));
  auto* config = reinterpret_cast<ncclConfig_t*>(bytes.data());
  config->size = bytes.size();
  config->version = 23100;
  const int one = 1;
  memcpy(bytes.data() + offsetof(ncclConfig_t, nvlinkCentricSched) + 3 * sizeof(int), &one, sizeof(int));
  ASSERT_EQ(initWith(config), ncclSuccess);
  EXPECT_TRUE(logHas(log, "config->maxP2pPeers = 1: no effect"));
}

}  // namespace
}  // namespace chorus_test
