// Point-to-point and groups: send/recv ring and all-pairs exchanges, nested
// groups, AlltoAll, Gather, Scatter, on threads and processes; and the NCCL
// documentation's single-process pattern (ncclCommInitAll, one thread, one group).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <ostream>
#include <string>
#include <vector>

#include "harness/byte_pattern.h"
#include "harness/datatypes.h"
#include "harness/failure_log.h"
#include "harness/links.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "harness/settle.h"
#include "harness/tuning_log.h"
#include "nccl.h"

namespace chorus_test {
namespace {

constexpr size_t kLargeBytes = (1u << 20) + 3;
const size_t kMessageBytes[] = {0, 1, kLargeBytes};

struct RankSetup {
  LaunchMode mode;
  int nranks;
};

std::string describeSetup(const RankSetup& setup) {
  return std::string(launchModeName(setup.mode)) + "_" + std::to_string(setup.nranks) + "ranks";
}

std::string setupName(const testing::TestParamInfo<RankSetup>& info) { return describeSetup(info.param); }

void PrintTo(const RankSetup& setup, std::ostream* out) { *out << describeSetup(setup); }

std::string callText(const std::string& what, size_t bytes, int rank, int peer) {
  return what + " bytes=" + std::to_string(bytes) + " rank " + std::to_string(rank) + " peer " + std::to_string(peer);
}

void expectPattern(FailureLog& log, const std::string& what, const unsigned char* data, size_t bytes, uint64_t key) {
  if (auto offset = findPatternMismatch(data, bytes, key)) {
    log.add(what + ": first wrong byte at offset " + std::to_string(*offset) + " expected " +
            std::to_string(patternByte(key, *offset)) + " got " + std::to_string(data[*offset]));
  }
}

void expectSuccess(FailureLog& log, const std::string& what, ncclResult_t result) {
  if (result != ncclSuccess) log.add(what + " returned " + resultName(result));
}

class PointToPointTest : public testing::TestWithParam<RankSetup> {};

TEST_P(PointToPointTest, RingExchangeInGroup) {
  const auto [mode, nranks] = GetParam();
  EXPECT_RANKS_OK(runRanks(mode, nranks, [](const RankContext& ctx) {
    FailureLog log;
    int next = (ctx.rank + 1) % ctx.nranks, prev = (ctx.rank + ctx.nranks - 1) % ctx.nranks;
    uint64_t call = 0;
    for (size_t bytes : kMessageBytes) {
      ++call;
      std::vector<unsigned char> sendBuffer(bytes + 1), recvBuffer(bytes + 1, 0xEE);
      fillPattern(sendBuffer.data(), bytes, patternKey(call, ctx.rank, next));
      ncclResult_t start = ncclGroupStart();
      ncclResult_t sent = ncclSend(sendBuffer.data(), bytes, ncclUint8, next, ctx.comm, nullptr);
      ncclResult_t received = ncclRecv(recvBuffer.data(), bytes, ncclUint8, prev, ctx.comm, nullptr);
      ncclResult_t end = ncclGroupEnd();
      expectSuccess(log, callText("ncclGroupStart", bytes, ctx.rank, next), start);
      expectSuccess(log, callText("ncclSend", bytes, ctx.rank, next), sent);
      expectSuccess(log, callText("ncclRecv", bytes, ctx.rank, prev), received);
      expectSuccess(log, callText("ncclGroupEnd", bytes, ctx.rank, prev), end);
      expectPattern(log, callText("ring recv", bytes, ctx.rank, prev), recvBuffer.data(), bytes,
                    patternKey(call, prev, ctx.rank));
      if (recvBuffer[bytes] != 0xEE) log.add(callText("ring recv wrote past count", bytes, ctx.rank, prev));
    }
    return log.outcome();
  }));
}

TEST_P(PointToPointTest, AllPairsExchangeInOneGroup) {
  const auto [mode, nranks] = GetParam();
  EXPECT_RANKS_OK(runRanks(mode, nranks, [](const RankContext& ctx) {
    FailureLog log;
    uint64_t call = 100;
    for (size_t bytes : kMessageBytes) {
      ++call;
      std::vector<std::vector<unsigned char>> sendBuffers(ctx.nranks), recvBuffers(ctx.nranks);
      std::vector<ncclResult_t> results;
      results.push_back(ncclGroupStart());
      for (int peer = 0; peer < ctx.nranks; ++peer) {  // every peer, self included
        sendBuffers[peer].resize(bytes);
        recvBuffers[peer].assign(bytes, 0xEE);
        fillPattern(sendBuffers[peer].data(), bytes, patternKey(call, ctx.rank, peer));
        results.push_back(ncclSend(sendBuffers[peer].data(), bytes, ncclUint8, peer, ctx.comm, nullptr));
        results.push_back(ncclRecv(recvBuffers[peer].data(), bytes, ncclUint8, peer, ctx.comm, nullptr));
      }
      results.push_back(ncclGroupEnd());
      for (size_t i = 0; i < results.size(); ++i) {
        expectSuccess(log, callText("all-pairs call #" + std::to_string(i), bytes, ctx.rank, -1), results[i]);
      }
      for (int peer = 0; peer < ctx.nranks; ++peer) {
        expectPattern(log, callText("all-pairs recv", bytes, ctx.rank, peer), recvBuffers[peer].data(), bytes,
                      patternKey(call, peer, ctx.rank));
      }
    }
    return log.outcome();
  }));
}

// GroupStart twice, End twice: nothing runs until the outer End, then all of it.
TEST_P(PointToPointTest, NestedGroupsCompleteAtOuterEnd) {
  const auto [mode, nranks] = GetParam();
  EXPECT_RANKS_OK(runRanks(mode, nranks, [](const RankContext& ctx) {
    FailureLog log;
    int next = (ctx.rank + 1) % ctx.nranks, prev = (ctx.rank + ctx.nranks - 1) % ctx.nranks;
    const size_t bytes = 4099;
    std::vector<unsigned char> sendBuffer(bytes), recvBuffer(bytes, 0);
    fillPattern(sendBuffer.data(), bytes, patternKey(7, ctx.rank, next));
    std::vector<int32_t> reduced(33, ctx.rank + 1);
    expectSuccess(log, "outer ncclGroupStart", ncclGroupStart());
    expectSuccess(log, "inner ncclGroupStart", ncclGroupStart());
    expectSuccess(log, "ncclSend", ncclSend(sendBuffer.data(), bytes, ncclUint8, next, ctx.comm, nullptr));
    expectSuccess(log, "ncclRecv", ncclRecv(recvBuffer.data(), bytes, ncclUint8, prev, ctx.comm, nullptr));
    expectSuccess(log, "inner ncclGroupEnd", ncclGroupEnd());
    expectSuccess(log, "ncclAllReduce in outer group",
                  ncclAllReduce(reduced.data(), reduced.data(), reduced.size(), ncclInt32, ncclSum, ctx.comm, nullptr));
    expectSuccess(log, "outer ncclGroupEnd", ncclGroupEnd());
    expectPattern(log, callText("nested-group recv", bytes, ctx.rank, prev), recvBuffer.data(), bytes,
                  patternKey(7, prev, ctx.rank));
    int32_t expectedSum = ctx.nranks * (ctx.nranks + 1) / 2;
    for (size_t i = 0; i < reduced.size(); ++i) {
      if (reduced[i] != expectedSum) {
        log.add("AllReduce in nested group: index " + std::to_string(i) + " expected " + std::to_string(expectedSum) +
                " got " + std::to_string(reduced[i]));
        break;
      }
    }
    return log.outcome();
  }));
}

// Counts per peer, with a type of each element size so offsets are scaled right.
struct SpreadCase {
  ncclDataType_t type;
  size_t count;
};
const SpreadCase kSpreadCases[] = {
    {ncclUint8, 0}, {ncclUint8, 1}, {ncclFloat32, 1023}, {ncclInt64, 7}, {ncclFloat16, 65537}};

TEST_P(PointToPointTest, AlltoAll) {
  const auto [mode, nranks] = GetParam();
  EXPECT_RANKS_OK(runRanks(mode, nranks, [](const RankContext& ctx) {
    FailureLog log;
    uint64_t call = 200;
    for (const SpreadCase& spread : kSpreadCases) {
      ++call;
      const size_t blockBytes = spread.count * traitsOf(spread.type).size;
      std::vector<unsigned char> sendBuffer(blockBytes * ctx.nranks), recvBuffer(blockBytes * ctx.nranks, 0xEE);
      for (int peer = 0; peer < ctx.nranks; ++peer) {
        fillPattern(sendBuffer.data() + peer * blockBytes, blockBytes, patternKey(call, ctx.rank, peer));
      }
      std::string what =
          std::string("ncclAlltoAll ") + traitsOf(spread.type).name + " count=" + std::to_string(spread.count);
      expectSuccess(log, what,
                    ncclAlltoAll(sendBuffer.data(), recvBuffer.data(), spread.count, spread.type, ctx.comm, nullptr));
      for (int peer = 0; peer < ctx.nranks; ++peer) {
        expectPattern(log, what + " block from rank " + std::to_string(peer) + " at rank " + std::to_string(ctx.rank),
                      recvBuffer.data() + peer * blockBytes, blockBytes, patternKey(call, peer, ctx.rank));
      }
    }
    return log.outcome();
  }));
}

// AlltoAll with overlapping buffers, which NCCL defines no in-place form for: a block
// received must not overwrite one not yet sent. In place at 8 MB per block (beyond what a
// connection holds, so receives run while sends still read), shifted by one byte, and two
// in one group; every block is checked.
TEST(AlltoAllOverlapping, EveryBlockArrivesAsSent) {
  for (LaunchMode mode : {LaunchMode::kThreads, LaunchMode::kProcesses}) {
    EXPECT_RANKS_OK(runRanks(mode, 3, [](const RankContext& ctx) {
      FailureLog log;
      const size_t blockSizes[] = {8u << 20, 4099};
      const size_t shifts[] = {0, 1};
      uint64_t call = 600;
      for (size_t blockBytes : blockSizes) {
        for (size_t shift : shifts) {
          ++call;
          const size_t total = blockBytes * ctx.nranks;
          std::vector<unsigned char> buffer(total + shift);
          for (int peer = 0; peer < ctx.nranks; ++peer)
            fillPattern(buffer.data() + peer * blockBytes, blockBytes, patternKey(call, ctx.rank, peer));
          const std::string what = "AlltoAll of " + std::to_string(blockBytes) + " bytes per block, recvbuff " +
                                   std::to_string(shift) + " bytes past sendbuff";
          expectSuccess(log, what,
                        ncclAlltoAll(buffer.data(), buffer.data() + shift, blockBytes, ncclUint8, ctx.comm, nullptr));
          for (int peer = 0; peer < ctx.nranks; ++peer)
            expectPattern(log, what + ": block from rank " + std::to_string(peer),
                          buffer.data() + shift + peer * blockBytes, blockBytes, patternKey(call, peer, ctx.rank));
        }
      }
      // Two in one group, each on its own buffer: each keeps its own copy until the group ran.
      std::vector<unsigned char> a(3 * 5000), b(3 * 5000);
      for (int peer = 0; peer < ctx.nranks; ++peer) {
        fillPattern(a.data() + peer * 5000, 5000, patternKey(700, ctx.rank, peer));
        fillPattern(b.data() + peer * 5000, 5000, patternKey(701, ctx.rank, peer));
      }
      ncclGroupStart();
      ncclAlltoAll(a.data(), a.data(), 5000, ncclUint8, ctx.comm, nullptr);
      ncclAlltoAll(b.data(), b.data(), 5000, ncclUint8, ctx.comm, nullptr);
      expectSuccess(log, "a group of two in-place AlltoAlls", ncclGroupEnd());
      for (int peer = 0; peer < ctx.nranks; ++peer) {
        expectPattern(log, "grouped a", a.data() + peer * 5000, 5000, patternKey(700, peer, ctx.rank));
        expectPattern(log, "grouped b", b.data() + peer * 5000, 5000, patternKey(701, peer, ctx.rank));
      }
      return log.outcome();
    }));
  }
}

// The copy is taken when the AlltoAll's launch starts, so it holds what the calls before it
// wrote: on a non-blocking communicator an in-place AllReduce still running on its worker
// when the AlltoAll is called. And on one rank a shifted AlltoAll is copied too.
TEST(AlltoAllOverlapping, TheCopyHoldsWhatEarlierCallsWrote) {
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kThreads, 2, [](int rank, int nranks, const ncclUniqueId& id) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
    if (settle(comm) != ncclSuccess) return RankOutcome::fail("init");
    constexpr size_t kBlock = 2 << 20;  // floats per rank's block: the AllReduce is still running
    std::vector<float> data(kBlock * nranks);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(rank * 7 + i % 1000);
    ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat32, ncclSum, comm, nullptr);
    ncclAlltoAll(data.data(), data.data(), kBlock, ncclFloat32, comm, nullptr);
    if (const ncclResult_t state = settle(comm); state != ncclSuccess) return RankOutcome::fail(resultName(state));
    ncclCommDestroy(comm);
    // Every rank sent its block `rank` of the same sums: element i of this rank's block j
    // is the sum at rank * kBlock + i.
    for (size_t j = 0; j < static_cast<size_t>(nranks); ++j)
      for (size_t i = 0; i < kBlock; i += 997) {
        const size_t at = rank * kBlock + i;
        const float want = static_cast<float>(0 * 7 + at % 1000) + static_cast<float>(1 * 7 + at % 1000);
        if (data[j * kBlock + i] != want)
          return RankOutcome::fail("block " + std::to_string(j) + " element " + std::to_string(i) + ": " +
                                   std::to_string(data[j * kBlock + i]) + " instead of " + std::to_string(want));
      }
    return RankOutcome::pass();
  }));
  ncclComm_t one = nullptr;
  ASSERT_EQ(ncclCommInitAll(&one, 1, nullptr), ncclSuccess);
  std::vector<unsigned char> shifted(5001);
  fillPattern(shifted.data(), 5000, patternKey(800, 0, 0));
  ASSERT_EQ(ncclAlltoAll(shifted.data(), shifted.data() + 1, 5000, ncclUint8, one, nullptr), ncclSuccess);
  EXPECT_FALSE(findPatternMismatch(shifted.data() + 1, 5000, patternKey(800, 0, 0)).has_value())
      << "one rank, recvbuff one byte past sendbuff";
  EXPECT_EQ(ncclCommDestroy(one), ncclSuccess);
}

TEST_P(PointToPointTest, GatherToFirstAndLastRoot) {
  const auto [mode, nranks] = GetParam();
  EXPECT_RANKS_OK(runRanks(mode, nranks, [](const RankContext& ctx) {
    FailureLog log;
    uint64_t call = 300;
    for (int root : {0, ctx.nranks - 1}) {
      for (const SpreadCase& spread : kSpreadCases) {
        ++call;
        const size_t blockBytes = spread.count * traitsOf(spread.type).size;
        std::vector<unsigned char> sendBuffer(blockBytes), recvBuffer(blockBytes * ctx.nranks, 0xEE);
        fillPattern(sendBuffer.data(), blockBytes, patternKey(call, ctx.rank, root));
        std::string what = std::string("ncclGather ") + traitsOf(spread.type).name +
                           " count=" + std::to_string(spread.count) + " root=" + std::to_string(root);
        expectSuccess(
            log, what,
            ncclGather(sendBuffer.data(), recvBuffer.data(), spread.count, spread.type, root, ctx.comm, nullptr));
        if (ctx.rank != root) continue;
        for (int peer = 0; peer < ctx.nranks; ++peer) {
          expectPattern(log, what + " block from rank " + std::to_string(peer), recvBuffer.data() + peer * blockBytes,
                        blockBytes, patternKey(call, peer, root));
        }
      }
    }
    return log.outcome();
  }));
}

TEST_P(PointToPointTest, ScatterFromFirstAndLastRoot) {
  const auto [mode, nranks] = GetParam();
  EXPECT_RANKS_OK(runRanks(mode, nranks, [](const RankContext& ctx) {
    FailureLog log;
    uint64_t call = 400;
    for (int root : {0, ctx.nranks - 1}) {
      for (const SpreadCase& spread : kSpreadCases) {
        ++call;
        const size_t blockBytes = spread.count * traitsOf(spread.type).size;
        std::vector<unsigned char> sendBuffer(ctx.rank == root ? blockBytes * ctx.nranks : 0);
        std::vector<unsigned char> recvBuffer(blockBytes, 0xEE);
        for (int peer = 0; ctx.rank == root && peer < ctx.nranks; ++peer) {
          fillPattern(sendBuffer.data() + peer * blockBytes, blockBytes, patternKey(call, root, peer));
        }
        std::string what = std::string("ncclScatter ") + traitsOf(spread.type).name +
                           " count=" + std::to_string(spread.count) + " root=" + std::to_string(root) + " rank " +
                           std::to_string(ctx.rank);
        expectSuccess(
            log, what,
            ncclScatter(sendBuffer.data(), recvBuffer.data(), spread.count, spread.type, root, ctx.comm, nullptr));
        expectPattern(log, what, recvBuffer.data(), blockBytes, patternKey(call, root, ctx.rank));
      }
    }
    return log.outcome();
  }));
}

std::vector<RankSetup> allSetups() {
  std::vector<RankSetup> setups;
  for (LaunchMode mode : {LaunchMode::kThreads, LaunchMode::kProcesses}) {
    for (int nranks : {1, 2, 3, 4, 8}) setups.push_back({mode, nranks});
  }
  return setups;
}

INSTANTIATE_TEST_SUITE_P(Ranks, PointToPointTest, testing::ValuesIn(allSetups()), setupName);

// The NCCL documentation's "single process, multiple devices" example: one
// thread, ncclCommInitAll, one AllReduce per communicator inside one group.
class InitAllTest : public testing::TestWithParam<int> {};

void checkInitAllComms(std::span<const ncclComm_t> comms, const int* devlist, std::vector<RankOutcome>& outcomes) {
  const int nranks = static_cast<int>(comms.size());
  for (int rank = 0; rank < nranks; ++rank) {
    FailureLog log;
    int count = -1, userRank = -1, device = -1;
    expectSuccess(log, "ncclCommCount", ncclCommCount(comms[rank], &count));
    expectSuccess(log, "ncclCommUserRank", ncclCommUserRank(comms[rank], &userRank));
    expectSuccess(log, "ncclCommCuDevice", ncclCommCuDevice(comms[rank], &device));
    if (count != nranks) log.add("ncclCommCount gave " + std::to_string(count));
    if (userRank != rank) log.add("ncclCommUserRank gave " + std::to_string(userRank));
    int expectedDevice = devlist ? devlist[rank] : rank;  // NULL devlist: devices 0..ndev-1
    if (device != expectedDevice) {
      log.add("ncclCommCuDevice gave " + std::to_string(device) + ", expected " + std::to_string(expectedDevice));
    }
    outcomes[rank] = log.outcome();
  }
}

std::vector<RankOutcome> allReduceFromOneThread(std::span<const ncclComm_t> comms) {
  const int nranks = static_cast<int>(comms.size());
  const size_t count = 262147;
  std::vector<std::vector<float>> sendBuffers(nranks), recvBuffers(nranks);
  std::vector<RankOutcome> outcomes(nranks);
  std::vector<ncclResult_t> issued(nranks);
  for (int rank = 0; rank < nranks; ++rank) {
    sendBuffers[rank].resize(count);
    for (size_t i = 0; i < count; ++i) sendBuffers[rank][i] = static_cast<float>((i + rank) % 5);
    recvBuffers[rank].assign(count, -1.0f);
  }
  ncclResult_t start = ncclGroupStart();
  for (int rank = 0; rank < nranks; ++rank) {
    issued[rank] = ncclAllReduce(sendBuffers[rank].data(), recvBuffers[rank].data(), count, ncclFloat32, ncclSum,
                                 comms[rank], nullptr);
  }
  ncclResult_t end = ncclGroupEnd();
  for (int rank = 0; rank < nranks; ++rank) {
    FailureLog log;
    expectSuccess(log, "ncclGroupStart", start);
    expectSuccess(log, "ncclAllReduce rank " + std::to_string(rank), issued[rank]);
    expectSuccess(log, "ncclGroupEnd", end);
    for (size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int peer = 0; peer < nranks; ++peer) expected += static_cast<float>((i + peer) % 5);
      if (recvBuffers[rank][i] != expected) {
        log.add("AllReduce from one thread: rank " + std::to_string(rank) + " index " + std::to_string(i) +
                " expected " + formatValue(expected) + " got " + formatValue(recvBuffers[rank][i]));
        break;
      }
    }
    outcomes[rank] = log.outcome();
  }
  return outcomes;
}

TEST_P(InitAllTest, NullDevlistOneThreadGroupAllReduce) {
  EXPECT_RANKS_OK(runAllRanksOneThread(GetParam(), [](std::span<const ncclComm_t> comms) {
    std::vector<RankOutcome> identity(comms.size());
    checkInitAllComms(comms, nullptr, identity);
    std::vector<RankOutcome> reduced = allReduceFromOneThread(comms);
    for (size_t rank = 0; rank < comms.size(); ++rank) {
      if (!identity[rank].ok) reduced[rank] = identity[rank];
    }
    return reduced;
  }));
}

TEST_P(InitAllTest, ExplicitDevlist) {
  const int nranks = GetParam();
  std::vector<int> devlist(nranks);
  for (int rank = 0; rank < nranks; ++rank) devlist[rank] = rank;
  std::vector<ncclComm_t> comms(nranks, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), nranks, devlist.data()), ncclSuccess);
  std::vector<RankOutcome> outcomes(nranks);
  checkInitAllComms(comms, devlist.data(), outcomes);
  std::vector<RankOutcome> reduced = allReduceFromOneThread(comms);
  for (int rank = 0; rank < nranks; ++rank) {
    EXPECT_TRUE(outcomes[rank].ok) << "rank " << rank << ": " << outcomes[rank].message;
    EXPECT_TRUE(reduced[rank].ok) << "rank " << rank << ": " << reduced[rank].message;
    EXPECT_EQ(ncclCommDestroy(comms[rank]), ncclSuccess);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, InitAllTest, testing::Values(1, 2, 3, 4, 8),
                         [](const testing::TestParamInfo<int>& info) { return std::to_string(info.param) + "ranks"; });

// A Send may come long after its Recv (a pipeline's stages start at different times): the
// first Send between two ranks sets up their connection, and the Recv already waiting must
// not give up on it as a failed set-up. Set-up waits are shortened to 2 s
// (CHORUS_BOOTSTRAP_TIMEOUT) and the sender comes 4 s late; over the network the receiving
// end used to wait for its sender's connection under that limit and fail.
TEST(LateSender, ARecvWaitsForAFirstSendThatComesAfterTheSetUpTimeout) {
  for (Link link : {Link::kNet, Link::kShm}) {
    SCOPED_TRACE(linkName(link));
    ScopedEnv env;
    env.set("CHORUS_BOOTSTRAP_TIMEOUT", "2");
    forceLink(env, link);
    EXPECT_RANKS_OK(runRanks(
        launchModeOf(link), 2,
        [](const RankContext& ctx) {
          std::vector<float> buf(4096, static_cast<float>(ctx.rank + 1));
          ncclResult_t r = ncclSuccess;
          if (ctx.rank == 0) {
            sleep(4);
            r = ncclSend(buf.data(), buf.size(), ncclFloat32, 1, ctx.comm, nullptr);
          } else {
            r = ncclRecv(buf.data(), buf.size(), ncclFloat32, 0, ctx.comm, nullptr);
          }
          if (r != ncclSuccess) return RankOutcome::fail(resultName(r));
          if (buf[0] != 1.0f || buf.back() != 1.0f) return RankOutcome::fail("rank 1 did not get rank 0's data");
          return RankOutcome::pass();
        },
        std::chrono::seconds(30)));
  }
}

// The other way round: a first Send whose receiver never makes its Recv waits for the
// peer's call, so CHORUS_TIMEOUT (2 s here) ends it, not the set-up limit (300 s), with
// ncclRemoteError and the hang report naming what it waits for.
TEST(LateSender, AFirstSendWhoseRecvNeverComesTimesOutUnderChorusTimeout) {
  ScopedEnv env;
  env.set("CHORUS_TIMEOUT", "2");
  TuningLogCapture log(env, "INIT");
  EXPECT_RANKS_OK(runRanks(
      LaunchMode::kProcesses, 2,
      [](const RankContext& ctx) {
        std::vector<float> buf(4096, 1.0f);
        if (ctx.rank == 1) {
          sleep(5);  // never receives
          return RankOutcome::pass();
        }
        const ncclResult_t r = ncclSend(buf.data(), buf.size(), ncclFloat32, 1, ctx.comm, nullptr);
        return r == ncclRemoteError ? RankOutcome::pass() : RankOutcome::fail("the Send returned " + resultName(r));
      },
      std::chrono::seconds(30)));
  bool reported = false;
  for (const std::string& line : log.lines())
    reported =
        reported || line.find("stuck: Send to rank 1 waits for rank 1's first Recv from rank 0") != std::string::npos;
  EXPECT_TRUE(reported) << "no hang report names the Recv the Send waits for";
}

}  // namespace
}  // namespace chorus_test
