// Entry points of NCCL 2.29 to 2.31: every one is exported (nccl* and pnccl*), so that a
// program built against those headers loads; suspend/resume and memory statistics work;
// the ones not implemented yet fail with an error and a WARN naming them.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "nccl.h"

// NCCL 2.30's ncclCommProperties_t and host entry points of its device API, as
// nccl_device/core.h declares them (Chorus' nccl.h has the host API only).
struct CommProperties {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int rank, nRanks, cudaDev, nvmlDev;
  bool deviceApiSupport, multimemSupport;
  int ginType;
  int nLsaTeams;
  bool hostRmaSupport;
  int railedGinType;
};
extern "C" ncclResult_t ncclCommQueryProperties(ncclComm_t comm, CommProperties* props);
extern "C" ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr);
extern "C" ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void** outPtr);

namespace chorus_test {
namespace {

TEST(NewerApi, EveryEntryPointIsExported) {
  const std::vector<std::string> names = {"ncclCommGetUniqueId",
                                          "ncclCommGrow",
                                          "ncclCommSuspend",
                                          "ncclCommResume",
                                          "ncclCommMemStats",
                                          "ncclWinGetUserPtr",
                                          "ncclPutSignal",
                                          "ncclSignal",
                                          "ncclWaitSignal",
                                          "ncclParamBind",
                                          "ncclParamGetI8",
                                          "ncclParamGetI16",
                                          "ncclParamGetI32",
                                          "ncclParamGetI64",
                                          "ncclParamGetU8",
                                          "ncclParamGetU16",
                                          "ncclParamGetU32",
                                          "ncclParamGetU64",
                                          "ncclParamGetStr",
                                          "ncclParamGet",
                                          "ncclParamGetParameter",
                                          "ncclParamGetAllParameterKeys",
                                          "ncclParamDumpAll",
                                          "ncclCommShrink",
                                          "ncclCommRevoke",
                                          "ncclCommSplit",
                                          "ncclSetEncryption",
                                          "ncclCommQueryProperties",
                                          "ncclGetPeerDevicePointer",
                                          "ncclGetLsaDevicePointer",
                                          "ncclGetLsaMultimemDevicePointer",
                                          "ncclGetMultimemDevicePointer",
                                          "ncclGinOutboxCreateRequirement",
                                          "ncclGinInboxA2ACreateRequirement"};
  for (const std::string& name : names) {
    EXPECT_NE(dlsym(RTLD_DEFAULT, name.c_str()), nullptr) << name;
    EXPECT_NE(dlsym(RTLD_DEFAULT, ("p" + name).c_str()), nullptr) << "p" << name;
  }
}

TEST(NewerApi, QueryPropertiesAnswersWithinTheCallersStruct) {
  std::vector<ncclComm_t> comms(3, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 3, nullptr), ncclSuccess);
  CommProperties props{sizeof(CommProperties), 0xcafebeef, 23007, -5, -5, -5, -5, true, true, 9, 9, false, 9};
  ASSERT_EQ(ncclCommQueryProperties(comms[2], &props), ncclSuccess);
  EXPECT_EQ(props.size, sizeof(CommProperties)) << "the header is the caller's";
  EXPECT_EQ(props.rank, 2);
  EXPECT_EQ(props.nRanks, 3);
  EXPECT_FALSE(props.deviceApiSupport) << "no device communicators";
  EXPECT_FALSE(props.multimemSupport);
  EXPECT_EQ(props.ginType, 0) << "NCCL_GIN_TYPE_NONE";
  EXPECT_TRUE(props.hostRmaSupport) << "ncclPutSignal works on host windows";
  // A struct of an older, shorter layout: nothing past its size is written.
  CommProperties shorter{
      offsetof(CommProperties, cudaDev), 0xcafebeef, 23000, -5, -5, -5, -5, true, true, 9, 9, false, 9};
  ASSERT_EQ(ncclCommQueryProperties(comms[1], &shorter), ncclSuccess);
  EXPECT_EQ(shorter.rank, 1);
  EXPECT_EQ(shorter.nRanks, 3);
  EXPECT_EQ(shorter.cudaDev, -5);
  EXPECT_TRUE(shorter.deviceApiSupport);
  CommProperties unset{};
  EXPECT_EQ(ncclCommQueryProperties(comms[0], &unset), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comms[0])).find("NCCL_COMM_PROPERTIES_INITIALIZER"), std::string::npos);
  EXPECT_EQ(ncclCommQueryProperties(comms[0], nullptr), ncclInvalidArgument);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// PyTorch 2.15 links these: they must exist; Chorus' windows are not mapped into peers,
// so they fail, say why and hand out no pointer.
TEST(NewerApi, DevicePointersOfAWindowAreRefused) {
  void* out = &out;
  EXPECT_EQ(ncclGetPeerDevicePointer(nullptr, 0, 1, &out), ncclInvalidUsage);
  EXPECT_EQ(out, nullptr);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("ncclGetPeerDevicePointer"), std::string::npos);
  out = &out;
  EXPECT_EQ(ncclGetLsaMultimemDevicePointer(nullptr, 0, &out), ncclInvalidUsage);
  EXPECT_EQ(out, nullptr);
}

TEST(NewerApi, SuspendStopsCollectivesUntilResume) {
  std::vector<ncclComm_t> comms(2, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 2, nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommSuspend(comms[0], 0x6), ncclSuccess) << "without NCCL_SUSPEND_MEM: a no-op, as NCCL";
  EXPECT_EQ(ncclCommSuspend(comms[0], 0), ncclSuccess);
  EXPECT_EQ(ncclCommResume(comms[0]), ncclInvalidUsage) << "not suspended";
  for (ncclComm_t c : comms) ASSERT_EQ(ncclCommSuspend(c, NCCL_SUSPEND_MEM), ncclSuccess);
  EXPECT_EQ(ncclCommSuspend(comms[0], NCCL_SUSPEND_MEM), ncclInvalidUsage) << "already suspended";
  uint64_t value = 7;
  ASSERT_EQ(ncclCommMemStats(comms[0], ncclStatGpuMemSuspended, &value), ncclSuccess);
  EXPECT_EQ(value, 1u);
  std::vector<int32_t> data(16, 1);
  EXPECT_EQ(ncclAllReduce(data.data(), data.data(), 16, ncclInt32, ncclSum, comms[0], nullptr), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(comms[0])).find("suspended"), std::string::npos);
  for (ncclComm_t c : comms) ASSERT_EQ(ncclCommResume(c), ncclSuccess);
  ASSERT_EQ(ncclCommMemStats(comms[0], ncclStatGpuMemSuspended, &value), ncclSuccess);
  EXPECT_EQ(value, 0u);
  std::vector<std::vector<int32_t>> values(2, std::vector<int32_t>(16));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    values[r].assign(16, r + 1);
    ncclAllReduce(values[r].data(), values[r].data(), 16, ncclInt32, ncclSum, comms[r], nullptr);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(values[0][15], 3);
  EXPECT_EQ(values[1][0], 3);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST(NewerApi, MemStatsOfAHostCommunicatorCountNoGpuMemory) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  std::vector<float> data(64, 1.0f);
  ASSERT_EQ(ncclAllReduce(data.data(), data.data(), 64, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
  for (ncclCommMemStat_t stat : {ncclStatGpuMemSuspend, ncclStatGpuMemPersist, ncclStatGpuMemTotal}) {
    uint64_t value = 99;
    ASSERT_EQ(ncclCommMemStats(comm, stat, &value), ncclSuccess) << stat;
    EXPECT_EQ(value, 0u) << "stat " << stat << ": a CPU communicator holds no GPU memory";
  }
  uint64_t value = 0;
  EXPECT_EQ(ncclCommMemStats(comm, static_cast<ncclCommMemStat_t>(9), &value), ncclInvalidArgument);
  EXPECT_EQ(ncclCommMemStats(comm, ncclStatGpuMemTotal, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// Without host RMA support NCCL fails the one-sided calls with ncclInvalidArgument; so does
// Chorus on a communicator with no registered window (its one-sided connections are made
// by the first registration), with a WARN naming the call. one_sided_test.cc has the rest.
TEST(NewerApi, OneSidedCallsWithoutAWindowFailAndSaySo) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  float x = 0;
  EXPECT_EQ(ncclPutSignal(&x, 1, ncclFloat32, 0, nullptr, 0, 0, 0, 0, comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("ncclPutSignal"), std::string::npos);
  EXPECT_EQ(ncclSignal(0, 0, 0, 0, comm, nullptr), ncclInvalidArgument);
  ncclWaitSignalDesc_t desc = {1, 0, 0, 0};
  EXPECT_EQ(ncclWaitSignal(1, &desc, comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("ncclWaitSignal"), std::string::npos);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// NCCL 2.32's socket encryption: "none" is what Chorus does; a pre-shared key is refused.
TEST(NewerApi, SetEncryptionAcceptsOnlyNone) {
  ncclEncryptionConfig_t config = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
  EXPECT_EQ(ncclSetEncryption(&config), ncclSuccess);
  config.mode = NCCL_ENCRYPTION_MODE_PSK;
  config.psk = "secret";
  EXPECT_EQ(ncclSetEncryption(&config), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("not supported"), std::string::npos);
  config.mode = 7;
  EXPECT_EQ(ncclSetEncryption(&config), ncclInvalidArgument);
  config = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
  config.magic = 0;
  EXPECT_EQ(ncclSetEncryption(&config), ncclInvalidArgument);
  EXPECT_EQ(ncclSetEncryption(nullptr), ncclInvalidArgument);
}

}  // namespace
}  // namespace chorus_test
