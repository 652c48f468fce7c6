// Collective fingerprints (device/common/call_stamp.h): ranks whose calls differ fail
// instead of returning success with wrong data, and the communicator stays failed.
//
// Each case has rank 0 and rank 1 make different calls (op, type, kind, count, a
// Broadcast or Reduce root, a Send/Recv byte count), then both make the same AllReduce.
// Checked on P2P (threads), SHM and NET (processes), with every protocol forced, at
// 1 KiB and 16 MiB:
//  - the mismatched call fails on every rank that had to receive from the other (all of
//    them, except where both ranks believe they are a Broadcast's root and only send);
//  - the matched call after it fails on every rank (the communicator is poisoned), so
//    nothing returns ncclSuccess with wrong data;
//  - a WARN says "calls do not match" and names both calls with their numbers, on every
//    link: over NET too, where a wait for a step that never comes (a Reduce root mismatch)
//    or for a slot never freed (two ranks each the root of a large Broadcast) learns the
//    peer's call from what the proxies relay (net_connection.h), well before
//    CHORUS_TIMEOUT, which is set far above what the test waits for; through a net plugin
//    as well, whose connections relay over a note link (note_link.h).
// And with CHORUS_FINGERPRINTS=0 the check is off: the same op mismatch goes unnoticed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/fresh_process.h"
#include "harness/links.h"
#include "harness/protocol_settings.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "harness/tuning_log.h"
#include "nccl.h"

namespace chorus_test {
namespace {

enum class Mismatch { kOp, kType, kKind, kCount, kBroadcastRoot, kReduceRoot, kSendRecvBytes };

const char* mismatchName(Mismatch m) {
  static const char* const kNames[] = {"Op", "Type", "Kind", "Count", "BroadcastRoot", "ReduceRoot", "SendRecvBytes"};
  return kNames[static_cast<int>(m)];
}

struct Case {
  Link link;
  Proto proto;
  size_t bytes;
  Mismatch mismatch;
  bool netPlugin = false;  // NET through the test net plugin, which has no notes: the note link relays
};

std::string caseName(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return std::string(linkName(c.link)) + (c.netPlugin ? "Plugin" : "") + protoName(c.proto) +
         (c.bytes >= (1u << 20) ? "16MiB" : "1KiB") + mismatchName(c.mismatch);
}

// The mismatched call as `rank` makes it, on float/int32 buffers of `elems` elements.
ncclResult_t mismatchedCall(Mismatch m, int rank, ncclComm_t comm, std::vector<float>& a, std::vector<float>& b,
                            size_t elems) {
  switch (m) {
    case Mismatch::kOp:
      return ncclAllReduce(a.data(), b.data(), elems, ncclFloat32, rank == 0 ? ncclSum : ncclMax, comm, nullptr);
    case Mismatch::kType:
      return ncclAllReduce(a.data(), b.data(), elems, rank == 0 ? ncclFloat32 : ncclInt32, ncclSum, comm, nullptr);
    case Mismatch::kKind:
      return rank == 0 ? ncclAllReduce(a.data(), b.data(), elems, ncclFloat32, ncclSum, comm, nullptr)
                       : ncclAllGather(a.data(), b.data(), elems / 2, ncclFloat32, comm, nullptr);
    case Mismatch::kCount:
      return ncclAllReduce(a.data(), b.data(), rank == 0 ? elems : elems / 2, ncclFloat32, ncclSum, comm, nullptr);
    case Mismatch::kBroadcastRoot:
      return ncclBroadcast(a.data(), b.data(), elems, ncclFloat32, rank, comm, nullptr);
    case Mismatch::kReduceRoot:
      return ncclReduce(a.data(), b.data(), elems, ncclFloat32, ncclSum, rank, comm, nullptr);
    case Mismatch::kSendRecvBytes:
      return rank == 0 ? ncclSend(a.data(), elems, ncclFloat32, 1, comm, nullptr)
                       : ncclRecv(b.data(), elems / 2, ncclFloat32, 0, comm, nullptr);
  }
  return ncclInternalError;
}

// Which ranks must see the mismatched call itself fail: those that receive from the other.
bool mustFailAtOnce(Mismatch m, int rank) {
  if (m == Mismatch::kBroadcastRoot) return false;  // both roots only send
  if (m == Mismatch::kSendRecvBytes) return rank == 1;
  return true;
}

class FingerprintTest : public testing::TestWithParam<Case> {};

TEST_P(FingerprintTest, MismatchFailsAndPoisonsTheCommunicator) {
  const Case c = GetParam();
  // A process picks its net once (as NCCL); forked ranks inherit a pick made before.
  if (c.netPlugin && !inFreshProcess()) return;
  ScopedEnv env;
  env.set("NCCL_PROTO", protoName(c.proto));
  env.set("CHORUS_TIMEOUT", "120");  // past the launcher's limit: only the call check may end a stuck wait
  forceLink(env, c.link);
  if (c.netPlugin) env.set("NCCL_NET_PLUGIN", std::string(CHORUS_TEST_NET_PLUGIN_DIR) + "/libnccl-net-chorustest.so");
  TuningLogCapture log(env, "INIT");
  const size_t elems = c.bytes / sizeof(float);
  const LaunchMode mode = launchModeOf(c.link);
  LaunchResult result = runRanksWithId(
      mode, 2,
      [&](int rank, int nranks, const ncclUniqueId& id) {
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init failed");
        std::vector<float> a(elems, 1.0f + rank), b(elems, 0.0f);
        // A matched call first: fingerprints must not fail correct programs.
        ncclResult_t warmUp = ncclAllReduce(a.data(), b.data(), elems, ncclFloat32, ncclSum, comm, nullptr);
        if (warmUp != ncclSuccess || b[0] != 3.0f || b[elems - 1] != 3.0f) {
          ncclCommAbort(comm);
          return RankOutcome::fail("the matched call before the mismatch failed: " + resultName(warmUp));
        }
        const ncclResult_t first = mismatchedCall(c.mismatch, rank, comm, a, b, elems);
        const ncclResult_t next = ncclAllReduce(a.data(), b.data(), elems, ncclFloat32, ncclSum, comm, nullptr);
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(comm, &async);
        ncclCommAbort(comm);
        if (first == ncclSuccess && mustFailAtOnce(c.mismatch, rank))
          return RankOutcome::fail("the mismatched call returned ncclSuccess");
        if (next == ncclSuccess) return RankOutcome::fail("the matched call after the mismatch returned ncclSuccess");
        if (async == ncclSuccess) return RankOutcome::fail("ncclCommGetAsyncError reports success after the mismatch");
        return RankOutcome::pass();
      },
      std::chrono::seconds(30));
  EXPECT_RANKS_OK(result);
  int naming = 0;
  for (const std::string& line : log.lines()) {
    if (line.find("calls do not match") == std::string::npos) continue;
    // Both calls named, each with its number: "rank 1 called AllReduce(max, ...) #2, rank 0 called ...".
    if (line.find("rank 0 called ") != std::string::npos && line.find("rank 1 called ") != std::string::npos &&
        line.find(") #") != std::string::npos)
      ++naming;
  }
  EXPECT_GE(naming, 1) << "no WARN names both ranks' calls";
  if (c.netPlugin) {
    int viaPlugin = 0;
    for (const std::string& line : log.lines()) viaPlugin += line.find("via NET/chorustest-v8") != std::string::npos;
    EXPECT_GE(viaPlugin, 1) << "no connection went through the net plugin";
  }
}

std::vector<Case> allCases() {
  std::vector<Case> cases;
  for (Link link : {Link::kP2p, Link::kShm, Link::kNet})
    for (Proto proto : {Proto::kSimple, Proto::kLL, Proto::kLL128})
      for (size_t bytes : {size_t{1024}, size_t{16} << 20})
        for (int m = 0; m <= static_cast<int>(Mismatch::kSendRecvBytes); ++m)
          cases.push_back(Case{link, proto, bytes, static_cast<Mismatch>(m)});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllLinks, FingerprintTest, testing::ValuesIn(allCases()), caseName);

// Through a net plugin (no notes of its own) the mismatches that leave a wait no step will
// end are caught by what the note link relays (transport/net/note_link.h), as over the
// socket net; without the link (CHORUS_NET_NOTE_LINK=0) these wait for CHORUS_TIMEOUT.
std::vector<Case> pluginCases() {
  std::vector<Case> cases;
  for (Proto proto : {Proto::kSimple, Proto::kLL, Proto::kLL128})
    for (size_t bytes : {size_t{1024}, size_t{16} << 20})
      for (Mismatch m : {Mismatch::kReduceRoot, Mismatch::kBroadcastRoot, Mismatch::kCount, Mismatch::kSendRecvBytes})
        cases.push_back(Case{Link::kNet, proto, bytes, m, true});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(NetPlugin, FingerprintTest, testing::ValuesIn(pluginCases()), caseName);

// The WARN names the two calls as the user made them.
TEST(FingerprintWarn, NamesOpTypeCountAndNumberOfBothCalls) {
  ScopedEnv env;
  env.set("NCCL_PROTO", "Simple");
  TuningLogCapture log(env, "INIT");
  LaunchResult result = runRanksWithId(LaunchMode::kThreads, 2, [](int rank, int nranks, const ncclUniqueId& id) {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init failed");
    std::vector<float> v(1024, 1.0f);
    for (int i = 0; i < 16; ++i) ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat32, ncclSum, comm, nullptr);
    const ncclResult_t r =
        ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat32, rank == 0 ? ncclSum : ncclMax, comm, nullptr);
    ncclCommAbort(comm);
    return r == ncclInvalidUsage
               ? RankOutcome::pass()
               : RankOutcome::fail("the 17th call returned " + resultName(r) + ", not ncclInvalidUsage");
  });
  EXPECT_RANKS_OK(result);
  bool named = false;
  for (const std::string& line : log.lines()) {
    const bool sumFirst = line.find("called AllReduce(sum, float32, 1024; Ring/Simple) #17") != std::string::npos;
    const bool maxToo = line.find("called AllReduce(max, float32, 1024; Ring/Simple) #17") != std::string::npos;
    named = named || (line.find("WARN") != std::string::npos && sumFirst && maxToo);
  }
  EXPECT_TRUE(named) << "no WARN names AllReduce(sum, ...) #17 and AllReduce(max, ...) #17";
}

// A matched program never fails the check, also when ranks pause mid-sequence for longer
// than a record takes to be relayed over the network (net_connection.h): with 3 ranks over
// NET (and SHM), each round one rank sleeps 30 ms before its calls while the others are
// already waiting in them, so relayed records of every kind of call and state meet waits.
// Over NET through the test net plugin too, where the records go over the note link.
TEST(FingerprintPauses, MatchedCallsWithPausesAllSucceed) {
  if (!inFreshProcess()) return;  // the plugin variant: a process picks its net once
  for (int variant = 0; variant < 3; ++variant) {
    const Link link = variant == 2 ? Link::kShm : Link::kNet;
    SCOPED_TRACE(variant == 1 ? "NET through a net plugin" : linkName(link));
    ScopedEnv env;
    env.set("CHORUS_TIMEOUT", "120");
    forceLink(env, link);
    if (variant == 1)
      env.set("NCCL_NET_PLUGIN", std::string(CHORUS_TEST_NET_PLUGIN_DIR) + "/libnccl-net-chorustest.so");
    LaunchResult result = runRanksWithId(
        launchModeOf(link), 3,
        [](int rank, int nranks, const ncclUniqueId& id) {
          ncclComm_t comm = nullptr;
          if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init failed");
          const size_t elems = 40000;
          std::vector<float> a(elems), b(elems);
          for (int round = 0; round < 9; ++round) {
            if (round % nranks == rank) usleep(30000);
            const int root = round % nranks;
            for (size_t i = 0; i < elems; ++i) a[i] = static_cast<float>(rank + 1 + (i % 7));
            ncclResult_t r = ncclAllReduce(a.data(), b.data(), elems, ncclFloat32, ncclSum, comm, nullptr);
            if (r == ncclSuccess && b[5] != 6.0f + 3 * 5) r = ncclInternalError;
            if (r == ncclSuccess) r = ncclBroadcast(a.data(), b.data(), elems, ncclFloat32, root, comm, nullptr);
            if (r == ncclSuccess && b[1] != static_cast<float>(root + 2)) r = ncclInternalError;
            if (r == ncclSuccess) r = ncclReduce(a.data(), b.data(), elems, ncclFloat32, ncclMax, root, comm, nullptr);
            if (r == ncclSuccess && rank == root && b[0] != 3.0f) r = ncclInternalError;
            if (r == ncclSuccess) {
              ncclGroupStart();
              ncclSend(a.data(), elems, ncclFloat32, (rank + 1) % nranks, comm, nullptr);
              ncclRecv(b.data(), elems, ncclFloat32, (rank + nranks - 1) % nranks, comm, nullptr);
              r = ncclGroupEnd();
            }
            if (r == ncclSuccess && b[0] != static_cast<float>((rank + nranks - 1) % nranks + 1)) r = ncclInternalError;
            if (r != ncclSuccess) {
              ncclCommAbort(comm);
              return RankOutcome::fail("round " + std::to_string(round) + ": " + resultName(r));
            }
          }
          ncclCommDestroy(comm);
          return RankOutcome::pass();
        },
        std::chrono::seconds(60));
    EXPECT_RANKS_OK(result);
  }
}

// CHORUS_FINGERPRINTS=0 turns the check off (the cost table in BENCHMARKS.md measures it):
// the op mismatch then passes unnoticed, which is what the setting's entry warns of.
TEST(FingerprintSetting, ZeroTurnsTheCheckOff) {
  ScopedEnv env;
  env.set("NCCL_PROTO", "Simple");
  env.set("CHORUS_FINGERPRINTS", "0");
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, 2, [](const RankContext& ctx) {
    std::vector<float> v(1024, 1.0f);
    const ncclResult_t r =
        ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat32, ctx.rank == 0 ? ncclSum : ncclMax, ctx.comm, nullptr);
    return r == ncclSuccess ? RankOutcome::pass() : RankOutcome::fail("returned " + resultName(r));
  }));
}

}  // namespace
}  // namespace chorus_test
