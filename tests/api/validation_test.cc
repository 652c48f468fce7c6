// Bad arguments get ncclInvalidArgument / ncclInvalidUsage, ncclGetLastError
// names the argument, and the communicator keeps working afterwards.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/failure_log.h"
#include "harness/rank_launcher.h"
#include "nccl.h"

namespace chorus_test {
namespace {

// kInternalError: what NCCL itself answers there (measured), odd as it is.
enum class Expect { kInvalidArgument, kInvalidUsage, kEither, kInternalError };

struct BadCall {
  const char* description;
  Expect expect;
  const char* errorMentions;  // case-insensitive substring of ncclGetLastError
  std::function<ncclResult_t(ncclComm_t comm, int nranks)> call;
};

// Valid-looking buffers for the calls whose other arguments are broken.
float gSend[64];
float gRecv[64 * 8];

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

const std::vector<BadCall>& badCalls() {
  static const auto kBadType1 = static_cast<ncclDataType_t>(12);
  static const auto kBadTypeMinus1 = static_cast<ncclDataType_t>(-1);
  static const auto kNotCreatedOp = static_cast<ncclRedOp_t>(5);
  static const auto kBadOp99 = static_cast<ncclRedOp_t>(99);
  static const std::vector<BadCall> kCalls = {
      {"AllReduce null sendbuff", Expect::kInvalidArgument, "sendbuff",
       [](ncclComm_t c, int) { return ncclAllReduce(nullptr, gRecv, 4, ncclFloat32, ncclSum, c, nullptr); }},
      {"AllReduce null recvbuff", Expect::kInvalidArgument, "recvbuff",
       [](ncclComm_t c, int) { return ncclAllReduce(gSend, nullptr, 4, ncclFloat32, ncclSum, c, nullptr); }},
      {"AllReduce datatype 12", Expect::kInvalidArgument, "datatype",
       [](ncclComm_t c, int) { return ncclAllReduce(gSend, gRecv, 4, kBadType1, ncclSum, c, nullptr); }},
      {"AllReduce datatype -1", Expect::kInvalidArgument, "datatype",
       [](ncclComm_t c, int) { return ncclAllReduce(gSend, gRecv, 4, kBadTypeMinus1, ncclSum, c, nullptr); }},
      {"AllReduce op 5 (never created)", Expect::kInvalidArgument, "op",
       [](ncclComm_t c, int) { return ncclAllReduce(gSend, gRecv, 4, ncclFloat32, kNotCreatedOp, c, nullptr); }},
      {"AllReduce op 99", Expect::kInvalidArgument, "op",
       [](ncclComm_t c, int) { return ncclAllReduce(gSend, gRecv, 4, ncclFloat32, kBadOp99, c, nullptr); }},
      {"AllReduce count SIZE_MAX", Expect::kInvalidArgument, "count",
       [](ncclComm_t c, int) { return ncclAllReduce(gSend, gRecv, SIZE_MAX, ncclFloat32, ncclSum, c, nullptr); }},
      {"AllGather sendcount SIZE_MAX/2 (overflows nranks*count bytes)", Expect::kInvalidArgument, "count",
       [](ncclComm_t c, int) { return ncclAllGather(gSend, gRecv, SIZE_MAX / 2, ncclFloat32, c, nullptr); }},
      {"AllReduce recvbuff one element past sendbuff", Expect::kInvalidArgument, "overlap",
       [](ncclComm_t c, int) { return ncclAllReduce(gRecv, gRecv + 1, 4, ncclFloat32, ncclSum, c, nullptr); }},
      {"AllGather sendbuff inside recvbuff, off its block", Expect::kInvalidArgument, "overlap",
       [](ncclComm_t c, int) { return ncclAllGather(gRecv + 1, gRecv, 4, ncclFloat32, c, nullptr); }},
      {"ReduceScatter recvbuff inside sendbuff, off its block", Expect::kInvalidArgument, "overlap",
       [](ncclComm_t c, int) { return ncclReduceScatter(gRecv, gRecv + 1, 4, ncclFloat32, ncclSum, c, nullptr); }},
      {"ReduceScatter datatype 12", Expect::kInvalidArgument, "datatype",
       [](ncclComm_t c, int) { return ncclReduceScatter(gSend, gRecv, 1, kBadType1, ncclSum, c, nullptr); }},
      {"ReduceScatter op 99", Expect::kInvalidArgument, "op",
       [](ncclComm_t c, int) { return ncclReduceScatter(gSend, gRecv, 1, ncclFloat32, kBadOp99, c, nullptr); }},
      {"AllGather null recvbuff", Expect::kInvalidArgument, "recvbuff",
       [](ncclComm_t c, int) { return ncclAllGather(gSend, nullptr, 4, ncclFloat32, c, nullptr); }},
      {"Reduce root -1", Expect::kInvalidArgument, "root",
       [](ncclComm_t c, int) { return ncclReduce(gSend, gRecv, 4, ncclFloat32, ncclSum, -1, c, nullptr); }},
      {"Reduce root nranks", Expect::kInvalidArgument, "root",
       [](ncclComm_t c, int n) { return ncclReduce(gSend, gRecv, 4, ncclFloat32, ncclSum, n, c, nullptr); }},
      {"Broadcast root -1", Expect::kInvalidArgument, "root",
       [](ncclComm_t c, int) { return ncclBroadcast(gSend, gRecv, 4, ncclFloat32, -1, c, nullptr); }},
      {"Broadcast root nranks", Expect::kInvalidArgument, "root",
       [](ncclComm_t c, int n) { return ncclBroadcast(gSend, gRecv, 4, ncclFloat32, n, c, nullptr); }},
      {"Bcast root nranks", Expect::kInvalidArgument, "root",
       [](ncclComm_t c, int n) { return ncclBcast(gRecv, 4, ncclFloat32, n, c, nullptr); }},
      {"Gather root nranks", Expect::kInvalidArgument, "root",
       [](ncclComm_t c, int n) { return ncclGather(gSend, gRecv, 4, ncclFloat32, n, c, nullptr); }},
      {"Scatter root -1", Expect::kInvalidArgument, "root",
       [](ncclComm_t c, int) { return ncclScatter(gRecv, gSend, 4, ncclFloat32, -1, c, nullptr); }},
      {"Send peer -1", Expect::kInvalidArgument, "peer",
       [](ncclComm_t c, int) { return ncclSend(gSend, 4, ncclFloat32, -1, c, nullptr); }},
      {"Send peer nranks", Expect::kInvalidArgument, "peer",
       [](ncclComm_t c, int n) { return ncclSend(gSend, 4, ncclFloat32, n, c, nullptr); }},
      {"Recv peer nranks", Expect::kInvalidArgument, "peer",
       [](ncclComm_t c, int n) { return ncclRecv(gRecv, 4, ncclFloat32, n, c, nullptr); }},
      {"Recv null recvbuff", Expect::kInvalidArgument, "recvbuff",
       [](ncclComm_t c, int) { return ncclRecv(nullptr, 4, ncclFloat32, 0, c, nullptr); }},
      {"Send datatype -1", Expect::kInvalidArgument, "datatype",
       [](ncclComm_t c, int) { return ncclSend(gSend, 4, kBadTypeMinus1, 0, c, nullptr); }},
      {"AlltoAll datatype 12", Expect::kInvalidArgument, "datatype",
       [](ncclComm_t c, int) { return ncclAlltoAll(gSend, gRecv, 1, kBadType1, c, nullptr); }},
      {"RedOpDestroy of builtin ncclSum", Expect::kEither, "op",
       [](ncclComm_t c, int) { return ncclRedOpDestroy(ncclSum, c); }},
      {"RedOpDestroy of never-created op 7", Expect::kEither, "op",
       [](ncclComm_t c, int) { return ncclRedOpDestroy(static_cast<ncclRedOp_t>(7), c); }},
      {"RedOpCreatePreMulSum null scalar", Expect::kInvalidArgument, "scalar",
       [](ncclComm_t c, int) {
         ncclRedOp_t op;
         return ncclRedOpCreatePreMulSum(&op, nullptr, ncclFloat32, ncclScalarHostImmediate, c);
       }},
      {"RedOpCreatePreMulSum null op", Expect::kInvalidArgument, "op",
       [](ncclComm_t c, int) {
         float scalar = 2;
         return ncclRedOpCreatePreMulSum(nullptr, &scalar, ncclFloat32, ncclScalarHostImmediate, c);
       }},
      {"RedOpCreatePreMulSum datatype 12", Expect::kInternalError, "datatype",
       [](ncclComm_t c, int) {
         ncclRedOp_t op;
         float scalar = 2;
         return ncclRedOpCreatePreMulSum(&op, &scalar, kBadType1, ncclScalarHostImmediate, c);
       }},
      {"CommCount null count", Expect::kInvalidArgument, "count",
       [](ncclComm_t c, int) { return ncclCommCount(c, nullptr); }},
      {"CommUserRank null rank", Expect::kInvalidArgument, "rank",
       [](ncclComm_t c, int) { return ncclCommUserRank(c, nullptr); }},
      {"CommCuDevice null device", Expect::kInvalidArgument, "device",
       [](ncclComm_t c, int) { return ncclCommCuDevice(c, nullptr); }},
      {"CommGetAsyncError null asyncError", Expect::kInvalidArgument, "asyncerror",
       [](ncclComm_t c, int) { return ncclCommGetAsyncError(c, nullptr); }},
      {"GroupEnd without GroupStart", Expect::kInvalidUsage, "group", [](ncclComm_t, int) { return ncclGroupEnd(); }},
  };
  return kCalls;
}

bool codeMatches(Expect expect, ncclResult_t result) {
  switch (expect) {
    case Expect::kInvalidArgument:
      return result == ncclInvalidArgument;
    case Expect::kInvalidUsage:
      return result == ncclInvalidUsage;
    case Expect::kEither:
      return result == ncclInvalidArgument || result == ncclInvalidUsage;
    case Expect::kInternalError:
      return result == ncclInternalError;
  }
  return false;
}

// Checks one bad call's code and error text; returns "" when both are right.
std::string checkBadCall(const BadCall& bad, ncclComm_t comm, int nranks) {
  ncclResult_t result = bad.call(comm, nranks);
  if (!codeMatches(bad.expect, result)) return std::string(bad.description) + ": returned " + resultName(result);
  const char* text = ncclGetLastError(comm);
  if (text == nullptr || *text == '\0') return std::string(bad.description) + ": ncclGetLastError is empty";
  if (lower(text).find(bad.errorMentions) == std::string::npos) {
    return std::string(bad.description) + ": ncclGetLastError does not mention '" + bad.errorMentions + "': " + text;
  }
  return "";
}

// An AllReduce with a known answer: the communicator still works.
std::string checkAllReduceWorks(ncclComm_t comm, int rank, int nranks) {
  std::vector<int64_t> values(1031, rank + 1);
  ncclResult_t result = ncclAllReduce(values.data(), values.data(), values.size(), ncclInt64, ncclSum, comm, nullptr);
  if (result != ncclSuccess) return "AllReduce after bad calls returned " + resultName(result);
  int64_t expected = static_cast<int64_t>(nranks) * (nranks + 1) / 2;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] != expected) {
      return "AllReduce after bad calls: index " + std::to_string(i) + " expected " + std::to_string(expected) +
             " got " + std::to_string(values[i]);
    }
  }
  return "";
}

TEST(Validation, BadArgumentsOnOneRankCommAreRejectedAndNamed) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  for (const BadCall& bad : badCalls()) {
    EXPECT_EQ(checkBadCall(bad, comm, 1), "");
    EXPECT_EQ(checkAllReduceWorks(comm, 0, 1), "") << "after " << bad.description;
  }
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// Processes, so each rank has its own ncclGetLastError.
TEST(Validation, BadArgumentsOnTwoProcessRanksLeaveCommWorking) {
  EXPECT_RANKS_OK(runRanks(LaunchMode::kProcesses, 2, [](const RankContext& ctx) {
    FailureLog log;
    for (const BadCall& bad : badCalls()) {
      std::string problem = checkBadCall(bad, ctx.comm, ctx.nranks);
      if (!problem.empty()) log.add(problem);
    }
    std::string problem = checkAllReduceWorks(ctx.comm, ctx.rank, ctx.nranks);
    if (!problem.empty()) log.add(problem);
    return log.outcome();
  }));
}

// ncclCommRegister's handles: each deregisters once; a handle deregistered already, another
// communicator's, or one never handed out is refused, never read through; a refused
// registration leaves no handle.
TEST(Validation, RegistrationHandlesAreCheckedBeforeUse) {
  std::vector<ncclComm_t> comms(2, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 2, nullptr), ncclSuccess);
  std::vector<float> buffer(1024);
  void* first = nullptr;
  void* second = nullptr;
  void* other = nullptr;
  ASSERT_EQ(ncclCommRegister(comms[0], buffer.data(), buffer.size() * sizeof(float), &first), ncclSuccess);
  ASSERT_EQ(ncclCommRegister(comms[0], buffer.data(), buffer.size() * sizeof(float), &second), ncclSuccess);
  ASSERT_EQ(ncclCommRegister(comms[1], buffer.data(), buffer.size() * sizeof(float), &other), ncclSuccess);
  EXPECT_NE(first, second);
  EXPECT_EQ(ncclCommDeregister(comms[0], reinterpret_cast<void*>(0x1234)), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDeregister(comms[0], other), ncclInvalidArgument) << "another communicator's handle";
  EXPECT_EQ(ncclCommDeregister(comms[0], first), ncclSuccess);
  EXPECT_EQ(ncclCommDeregister(comms[0], first), ncclInvalidArgument) << "deregistered twice";
  EXPECT_NE(lower(ncclGetLastError(comms[0])).find("not a live registration"), std::string::npos);
  EXPECT_EQ(ncclCommDeregister(comms[0], second), ncclSuccess) << "the second registration of the same buffer";
  EXPECT_EQ(ncclCommDeregister(comms[1], other), ncclSuccess);
  void* refused = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(ncclCommRegister(comms[0], buffer.data(), 0, &refused), ncclInvalidArgument);
  EXPECT_EQ(refused, nullptr);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST(Validation, NullCommunicatorIsRejected) {
  EXPECT_EQ(ncclAllReduce(gSend, gRecv, 4, ncclFloat32, ncclSum, nullptr, nullptr), ncclInvalidArgument);
  const char* text = ncclGetLastError(nullptr);
  ASSERT_NE(text, nullptr);
  EXPECT_NE(lower(text).find("comm"), std::string::npos) << text;
  int value = 0;
  EXPECT_EQ(ncclCommCount(nullptr, &value), ncclInvalidArgument);
  EXPECT_EQ(ncclCommUserRank(nullptr, &value), ncclInvalidArgument);
  EXPECT_EQ(ncclCommCuDevice(nullptr, &value), ncclInvalidArgument);
  EXPECT_EQ(ncclSend(gSend, 1, ncclFloat32, 0, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclBroadcast(gSend, gRecv, 1, ncclFloat32, 0, nullptr, nullptr), ncclInvalidArgument);
  ncclResult_t asyncError;
  EXPECT_EQ(ncclCommGetAsyncError(nullptr, &asyncError), ncclInvalidArgument);
}

TEST(Validation, DestroyedCommunicatorIsRejectedAsUsageError) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  ASSERT_EQ(ncclCommDestroy(comm), ncclSuccess);
  ncclComm_t destroyed = comm;  // a stale handle, exactly as a buggy program would keep it
  auto isUsageOrArgument = [](ncclResult_t r) { return r == ncclInvalidUsage || r == ncclInvalidArgument; };
  ncclResult_t result = ncclAllReduce(gSend, gRecv, 4, ncclFloat32, ncclSum, destroyed, nullptr);
  EXPECT_TRUE(isUsageOrArgument(result)) << resultName(result);
  EXPECT_EQ(result, ncclInvalidUsage) << "NCCL reports use of a destroyed communicator as a usage error";
  const char* text = ncclGetLastError(destroyed);
  ASSERT_NE(text, nullptr);
  EXPECT_NE(lower(text).find("comm"), std::string::npos) << text;
  int count = 0;
  EXPECT_TRUE(isUsageOrArgument(ncclCommCount(destroyed, &count)));
  EXPECT_TRUE(isUsageOrArgument(ncclCommDestroy(destroyed))) << "second destroy must not succeed";
}

TEST(Validation, CommInitRankArgumentsAreChecked) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  auto expectRejected = [&](ncclResult_t result, const char* mentions, const char* what) {
    EXPECT_EQ(result, ncclInvalidArgument) << what << ": " << resultName(result);
    const char* text = ncclGetLastError(nullptr);
    ASSERT_NE(text, nullptr) << what;
    EXPECT_NE(lower(text).find(mentions), std::string::npos) << what << ": " << text;
    if (result == ncclSuccess && comm != nullptr) ncclCommDestroy(comm);
    comm = nullptr;
  };
  expectRejected(ncclCommInitRank(&comm, 0, id, 0), "nranks", "nranks 0");
  expectRejected(ncclCommInitRank(&comm, -3, id, 0), "nranks", "nranks -3");
  expectRejected(ncclCommInitRank(&comm, 1, id, 1), "rank", "rank == nranks");
  expectRejected(ncclCommInitRank(&comm, 2, id, -1), "rank", "rank -1");
  expectRejected(ncclCommInitRank(nullptr, 1, id, 0), "comm", "null comm pointer");
  expectRejected(ncclCommInitAll(nullptr, 1, nullptr), "comm", "InitAll null comm array");
  ncclComm_t comms[2] = {nullptr, nullptr};
  expectRejected(ncclCommInitAll(comms, -1, nullptr), "ndev", "InitAll ndev -1");
  const int negative[] = {0, -5};
  expectRejected(ncclCommInitAll(comms, 2, negative), "devlist[1] = -5", "InitAll devlist -5");
  const int twice[] = {0, 0};
  EXPECT_EQ(ncclCommInitAll(comms, 2, twice), ncclInvalidUsage) << "as NCCL: a duplicate device is invalid usage";
  EXPECT_EQ(ncclCommInitAll(comms, 0, nullptr), ncclSuccess) << "as NCCL: no devices, nothing to do";
  EXPECT_EQ(comms[0], nullptr);
  EXPECT_EQ(ncclGetUniqueId(nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);
}

TEST(Validation, MismatchedConfigStructIsRejected) {
  struct ConfigCase {
    const char* what;
    std::function<void(ncclConfig_t&)> breakIt;
  };
  const ConfigCase cases[] = {
      {"magic 0x12345678", [](ncclConfig_t& c) { c.magic = 0x12345678; }},
      {"size 0", [](ncclConfig_t& c) { c.size = 0; }},
      {"version 0", [](ncclConfig_t& c) { c.version = 0; }},
      {"blocking 7", [](ncclConfig_t& c) { c.blocking = 7; }},
  };
  for (const ConfigCase& broken : cases) {
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    broken.breakIt(config);
    ncclComm_t comm = nullptr;
    ncclResult_t result = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
    EXPECT_TRUE(result == ncclInvalidArgument || result == ncclInvalidUsage)
        << broken.what << ": " << resultName(result);
    const char* text = ncclGetLastError(nullptr);
    ASSERT_NE(text, nullptr);
    EXPECT_NE(lower(text).find("config"), std::string::npos) << broken.what << ": " << text;
    if (result == ncclSuccess || result == ncclInProgress) ncclCommDestroy(comm);
  }
}

}  // namespace
}  // namespace chorus_test
