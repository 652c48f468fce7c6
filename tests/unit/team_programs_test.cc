// device/common's programs run by teams of threads (tests/unit/team_exec.h), as a GPU
// block runs them: every collective × algorithm × protocol across 2 and 3 ranks of 4
// threads each (LL128 also by a team of 16 that moves each line by a group of eight
// threads, as a warp does), checked against values computed here; and an abort that must
// release every thread of a waiting team.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "device/common/datatypes.h"
#include "device/common/dynamic_red_op.h"
#include "device/common/ll128_primitives.h"
#include "device/common/ll_primitives.h"
#include "device/common/programs.h"
#include "device/common/simple_primitives.h"
#include "fifo_fixture.h"
#include "team_exec.h"
#include "work_item_fixture.h"

namespace chorus {
namespace {

using fixtures::rankInput;
using fixtures::TeamExec;
using fixtures::TeamExecOf;
using fixtures::TeamState;
using fixtures::TestFifo;
using fixtures::wholeCallItem;

// Small slots: many steps and partial lines, yet several lines per thread of a team.
size_t slotBytesFor(Protocol proto) { return proto == Protocol::LL128 ? 128 * 12 : 512; }

template <template <class, class, class> class P, Protocol Proto, typename E = TeamExec, int TeamSize = 4>
struct ProtocolTag {
  template <typename T, typename Op, typename Exec>
  using Prims = P<T, Op, Exec>;
  static constexpr Protocol kProtocol = Proto;
  using Exec = E;
  static constexpr int kTeamSize = TeamSize;
};
using SimpleTag = ProtocolTag<SimplePrimitives, Protocol::Simple>;
using LLTag = ProtocolTag<LLPrimitives, Protocol::LL>;
using LL128Tag = ProtocolTag<LL128Primitives, Protocol::LL128>;
// Two groups of eight: lines dealt to groups, pieces within each.
using LL128WarpLinesTag = ProtocolTag<LL128Primitives, Protocol::LL128, TeamExecOf<8>, 16>;

// n ranks in one process: a ring (r -> r+1) and a chain tree rooted at rank 0 (rank r's
// parent is r - 1), every connection a FIFO of the protocol under test.
class TeamRanks {
 public:
  TeamRanks(int nranks, Protocol proto) : n_(nranks), proto_(proto), ctx_(nranks), abort_(nranks) {
    for (int r = 0; r < n_; ++r) {
      ring_.push_back(std::make_unique<TestFifo>(proto, slotBytesFor(proto)));
      up_.push_back(std::make_unique<TestFifo>(proto, slotBytesFor(proto)));    // r -> r - 1 (unused for r = 0)
      down_.push_back(std::make_unique<TestFifo>(proto, slotBytesFor(proto)));  // r - 1 -> r (unused for r = 0)
      ctx_[r].abortFlag = &abort_[r];
      ctx_[r].timeoutSec = 60;
    }
    ringRanks_.assign(n_, std::vector<int>(n_));
    views_.resize(n_);
    p2pRecv_.assign(n_, std::vector<FifoEnd*>(n_, nullptr));
    p2pSend_.assign(n_, std::vector<FifoEnd*>(n_, nullptr));
    for (int r = 0; r < n_; ++r) {
      for (int k = 0; k < n_; ++k) ringRanks_[r][k] = (r + k) % n_;
      ChannelView& v = views_[r];
      v.ringSend = &ring_[r]->sender;
      v.ringRecv = &ring_[(r + n_ - 1) % n_]->receiver;
      v.ringRanks = ringRanks_[r].data();
      v.tree.parent = r - 1;
      if (r > 0) {
        v.tree.sendUp = &up_[r]->sender;
        v.tree.recvDown = &down_[r]->receiver;
      }
      if (r + 1 < n_) {
        v.tree.nChildren = 1;
        v.tree.recvUp[0] = &up_[r + 1]->receiver;
        v.tree.sendDown[0] = &down_[r + 1]->sender;
      }
    }
    comms_.resize(n_);
    for (int r = 0; r < n_; ++r) comms_[r] = CommView{r, n_, 1, &views_[r], p2pSend_[r].data(), p2pRecv_[r].data()};
  }

  // Rank 0 receives from rank `from` over its ring connection (nobody sends on it).
  void routeRecvFromRing(int from) { p2pRecv_[0][from] = &ring_[n_ - 1]->receiver; }
  // Sends and receives between ring neighbours over the ring's connections, marked direct
  // (FifoEnd::direct) as P2P between ranks of one process is.
  void routeP2pOverRing() {
    for (int r = 0; r < n_; ++r) {
      const int next = (r + 1) % n_;
      p2pSend_[r][next] = &ring_[r]->sender;
      p2pRecv_[next][r] = &ring_[r]->receiver;
      ring_[r]->sender.direct = ring_[r]->receiver.direct = true;
    }
  }
  // Moves every ring connection's LL128 buffer 8 bytes on: 8-byte aligned, not 16.
  void misalignLl128Buffers() {
    for (auto& fifo : ring_)
      for (FifoEnd* e : {&fifo->sender, &fifo->receiver}) e->buffs[static_cast<int>(Protocol::LL128)] += 8;
  }
  // The bytes a connection's Simple slots hold.
  size_t slotsHold() const {
    const FifoEnd& e = ring_[0]->sender;
    return e.slotBytes[static_cast<int>(Protocol::Simple)] * static_cast<size_t>(e.nSlots);
  }
  // Whether rank `to`'s last step received from its ring predecessor came in place.
  bool lastStepInPlace(int to) const {
    const FifoEnd& e = ring_[(to + n_ - 1) % n_]->receiver;
    return e.ctrl->stamps[(e.step - 1) & static_cast<uint64_t>(e.nSlots - 1)].stamp.bytes < 0;
  }

  // Runs items[r] on rank r with a team of Tag::kTeamSize threads per rank.
  template <typename Tag, typename T, typename Op>
  void run(const std::vector<WorkItem>& items, const Op& op) {
    std::vector<std::vector<WorkItem>> lanes;
    for (const WorkItem& w : items) lanes.push_back({w});
    runLanes<Tag, T>(lanes, op);
  }
  // Runs lanes[r]'s items, in order, on rank r.
  template <typename Tag, typename T, typename Op>
  void runLanes(const std::vector<std::vector<WorkItem>>& lanes, const Op& op) {
    using Exec = typename Tag::Exec;
    std::vector<std::unique_ptr<TeamState>> teams;
    for (int r = 0; r < n_; ++r) teams.push_back(std::make_unique<TeamState>(Tag::kTeamSize, Exec::kLineThreads));
    std::vector<std::thread> threads;
    for (int r = 0; r < n_; ++r) {
      for (int t = 0; t < Tag::kTeamSize; ++t) {
        threads.emplace_back([&, r, t] {
          Exec exec(ctx_[r], *teams[r], t, Tag::kTeamSize);
          for (const WorkItem& w : lanes[r]) programs::runItem<Tag::template Prims, T>(exec, comms_[r], w, op);
        });
      }
    }
    for (auto& th : threads) th.join();
    for (const auto& team : teams) linePieces_ += team->linePieces.load();
  }
  // Lines moved piece by piece (TeamExecOf<8>) so far.
  long linePieces() const { return linePieces_; }

  int result(int r) const { return ctx_[r].result.load(); }
  void abort(int r) { abort_[r].store(1); }
  uint64_t ringSendStep(int r) const { return ring_[r]->sender.step; }

 private:
  int n_;
  Protocol proto_;
  std::vector<std::unique_ptr<TestFifo>> ring_, up_, down_;
  std::vector<ExecContext> ctx_;
  std::vector<std::atomic<uint32_t>> abort_;
  std::vector<std::vector<int>> ringRanks_;
  std::vector<ChannelView> views_;
  std::vector<std::vector<FifoEnd*>> p2pRecv_;
  std::vector<std::vector<FifoEnd*>> p2pSend_;
  std::vector<CommView> comms_;
  long linePieces_ = 0;
};

template <typename Tag>
class TeamProgramsTest : public ::testing::Test {};
using Protocols = ::testing::Types<SimpleTag, LLTag, LL128Tag, LL128WarpLinesTag>;
TYPED_TEST_SUITE(TeamProgramsTest, Protocols);

const size_t kCounts[] = {1, 37, 4099};

// AllReduce (ring, and tree) of int32 sums.
TYPED_TEST(TeamProgramsTest, AllReduceRingAndTree) {
  using Op = RedOp<int32_t, RedKind::Sum>;
  for (int nranks : {2, 3}) {
    for (Algorithm algo : {Algorithm::Ring, Algorithm::Tree}) {
      for (size_t count : kCounts) {
        TeamRanks ranks(nranks, TypeParam::kProtocol);
        std::vector<std::vector<int32_t>> send(nranks, std::vector<int32_t>(count)), recv = send;
        std::vector<WorkItem> items;
        for (int r = 0; r < nranks; ++r) {
          for (size_t i = 0; i < count; ++i) send[r][i] = rankInput(r, i);
          items.push_back(wholeCallItem(WorkKind::AllReduce, algo, TypeParam::kProtocol, ncclInt32, send[r].data(),
                                        recv[r].data(), count, 0));
        }
        ranks.run<TypeParam, int32_t>(items, Op{0, 1});
        EXPECT_EQ(ranks.linePieces() > 0, TypeParam::Exec::kLineThreads > 1) << "LL128 data lines by groups";
        for (int r = 0; r < nranks; ++r) {
          ASSERT_EQ(ranks.result(r), ncclSuccess);
          for (size_t i = 0; i < count; ++i) {
            int32_t expected = 0;
            for (int q = 0; q < nranks; ++q) expected += rankInput(q, i);
            ASSERT_EQ(recv[r][i], expected) << nranks << " ranks, algo " << static_cast<int>(algo) << ", count "
                                            << count << ", rank " << r << ", index " << i;
          }
        }
      }
    }
  }
}

// An average by PreMulSum(1/2) over floats whose products and sums are exact.
TYPED_TEST(TeamProgramsTest, AllReduceFloatPreMulSum) {
  using Op = RedOp<float, RedKind::PreMulSum>;
  const int nranks = 3;
  const size_t count = 2053;
  TeamRanks ranks(nranks, TypeParam::kProtocol);
  std::vector<std::vector<float>> send(nranks, std::vector<float>(count)), recv = send;
  std::vector<WorkItem> items;
  for (int r = 0; r < nranks; ++r) {
    for (size_t i = 0; i < count; ++i) send[r][i] = static_cast<float>(rankInput(r, i));
    items.push_back(wholeCallItem(WorkKind::AllReduce, Algorithm::Ring, TypeParam::kProtocol, ncclFloat32,
                                  send[r].data(), recv[r].data(), count, 0));
  }
  ranks.run<TypeParam, float>(items, Op{0.5f, 1});
  for (int r = 0; r < nranks; ++r) {
    ASSERT_EQ(ranks.result(r), ncclSuccess);
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(recv[r][i], 0.5f * static_cast<float>(rankInput(0, i) + rankInput(1, i) + rankInput(2, i)))
          << r << " " << i;
  }
}

// The GPU's run-time op (DynamicRedOp), here Min, through the same team programs.
TYPED_TEST(TeamProgramsTest, AllReduceRunTimeOpMin) {
  const int nranks = 3;
  const size_t count = 3001;
  TeamRanks ranks(nranks, TypeParam::kProtocol);
  std::vector<std::vector<int32_t>> send(nranks, std::vector<int32_t>(count)), recv = send;
  std::vector<WorkItem> items;
  for (int r = 0; r < nranks; ++r) {
    for (size_t i = 0; i < count; ++i) send[r][i] = rankInput(r, i) * (i % 3 == 0 ? -1 : 1);
    items.push_back(wholeCallItem(WorkKind::AllReduce, Algorithm::Ring, TypeParam::kProtocol, ncclInt32, send[r].data(),
                                  recv[r].data(), count, 0));
  }
  ranks.run<TypeParam, int32_t>(items, DynamicRedOp<int32_t>{RedKind::Min, 0, 1});
  for (int r = 0; r < nranks; ++r) {
    ASSERT_EQ(ranks.result(r), ncclSuccess);
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(recv[r][i], std::min({send[0][i], send[1][i], send[2][i]})) << r << " " << i;
  }
}

// ReduceScatter (Max), AllGather, Broadcast from rank 1 and Reduce (Sum) to rank 2.
TYPED_TEST(TeamProgramsTest, ReduceScatterAllGatherBroadcastReduce) {
  const int nranks = 3;
  const Protocol proto = TypeParam::kProtocol;
  for (size_t count : kCounts) {
    std::vector<std::vector<int32_t>> wide(nranks, std::vector<int32_t>(nranks * count));
    std::vector<std::vector<int32_t>> narrow(nranks, std::vector<int32_t>(count));
    std::vector<std::vector<int32_t>> out(nranks), outWide(nranks);
    for (int r = 0; r < nranks; ++r) {
      for (size_t i = 0; i < wide[r].size(); ++i) wide[r][i] = rankInput(r, i * 3 + 1) * (r % 2 == 0 ? 1 : -1);
      for (size_t i = 0; i < count; ++i) narrow[r][i] = rankInput(r, i);
    }
    auto runAll = [&](WorkKind kind, int root, auto op, bool wideIn, bool wideOut) {
      TeamRanks ranks(nranks, proto);
      std::vector<WorkItem> items;
      for (int r = 0; r < nranks; ++r) {
        out[r].assign(count, -1);
        outWide[r].assign(nranks * count, -1);
        items.push_back(wholeCallItem(kind, Algorithm::Ring, proto, ncclInt32,
                                      wideIn ? wide[r].data() : narrow[r].data(),
                                      wideOut ? outWide[r].data() : out[r].data(), count, root));
      }
      ranks.run<TypeParam, int32_t>(items, op);
      for (int r = 0; r < nranks; ++r) ASSERT_EQ(ranks.result(r), ncclSuccess) << "rank " << r;
    };

    runAll(WorkKind::ReduceScatter, 0, RedOp<int32_t, RedKind::Max>{0, 1}, true, false);
    for (int r = 0; r < nranks; ++r)
      for (size_t i = 0; i < count; ++i) {
        int32_t expected = wide[0][r * count + i];
        for (int q = 1; q < nranks; ++q) expected = std::max(expected, wide[q][r * count + i]);
        ASSERT_EQ(out[r][i], expected) << "ReduceScatter count " << count << " rank " << r << " index " << i;
      }

    runAll(WorkKind::AllGather, 0, RedOp<int32_t, RedKind::Sum>{0, 1}, false, true);
    for (int r = 0; r < nranks; ++r)
      for (int q = 0; q < nranks; ++q)
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(outWide[r][q * count + i], narrow[q][i]) << "AllGather count " << count << " rank " << r;

    runAll(WorkKind::Broadcast, 1, RedOp<int32_t, RedKind::Sum>{0, 1}, false, false);
    for (int r = 0; r < nranks; ++r)
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[r][i], narrow[1][i]) << "Broadcast rank " << r;

    runAll(WorkKind::Reduce, 2, RedOp<int32_t, RedKind::Sum>{0, 1}, false, false);
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(out[2][i], narrow[0][i] + narrow[1][i] + narrow[2][i]) << "Reduce count " << count << " index " << i;
  }
}

// Send/Recv in place (simple_primitives.h, beginP2p) by teams: past what the slots hold, a
// receiver that offers its buffer gets every step written there by the sender's team (the
// offer found by its thread 0, shared with the rest); smaller ones and ones not offered go
// through the slots. Each rank sends to the next and receives from the previous at once.
TEST(TeamProgramsInPlace, SendRecvInPlaceByTeams) {
  using TypeParam = SimpleTag;  // only Simple moves in place
  const int nranks = 3;
  for (bool offered : {true, false}) {
    for (size_t factor : {0, 3}) {
      TeamRanks ranks(nranks, TypeParam::kProtocol);
      ranks.routeP2pOverRing();
      const size_t count = factor == 0 ? ranks.slotsHold() / sizeof(int32_t) : factor * ranks.slotsHold() / 4 + 5;
      std::vector<std::vector<int32_t>> send(nranks, std::vector<int32_t>(count)), recv = send;
      std::vector<std::vector<WorkItem>> lanes(nranks);
      for (int r = 0; r < nranks; ++r) {
        for (size_t i = 0; i < count; ++i) send[r][i] = rankInput(r, i);
        std::fill(recv[r].begin(), recv[r].end(), -7);
      }
      // Two lanes per rank would need two teams; here a rank's team sends, then receives,
      // and rank 0 receives first so the ring does not wait on itself.
      for (int r = 0; r < nranks; ++r) {
        WorkItem s = wholeCallItem(WorkKind::Send, Algorithm::Ring, Protocol::Simple, ncclInt32, send[r].data(),
                                   nullptr, count, (r + 1) % nranks);
        WorkItem v = wholeCallItem(WorkKind::Recv, Algorithm::Ring, Protocol::Simple, ncclInt32, nullptr,
                                   recv[r].data(), count, (r + nranks - 1) % nranks);
        s.stamp = CallStamp{1, count * sizeof(int32_t), -1, kStampSend, 0, 0, 0x12};
        v.stamp = CallStamp{1, count * sizeof(int32_t), -1, kStampRecv, 0, 0, 0x12};
        v.recvOffered = offered;
        lanes[r] = r == 0 ? std::vector<WorkItem>{v, s} : std::vector<WorkItem>{s, v};
      }
      ranks.runLanes<TypeParam, int32_t>(lanes, RedOp<int32_t, RedKind::Sum>{0, 1});
      for (int r = 0; r < nranks; ++r) {
        ASSERT_EQ(ranks.result(r), ncclSuccess) << "rank " << r;
        ASSERT_EQ(recv[r], send[(r + nranks - 1) % nranks]) << "rank " << r << " count " << count;
        EXPECT_EQ(ranks.lastStepInPlace(r), offered && factor != 0) << "rank " << r << " count " << count;
      }
    }
  }
}

// Lines moved by groups of threads are 16-byte accesses (a misaligned one would fault on a
// GPU): a slot only 8-byte aligned fails the call cleanly on every rank; one thread per line
// takes it.
TEST(TeamProgramsWarpLines, ASlotNot16ByteAlignedFailsCleanly) {
  for (bool groups : {true, false}) {
    TeamRanks ranks(2, Protocol::LL128);
    ranks.misalignLl128Buffers();
    std::vector<std::vector<int32_t>> send(2, std::vector<int32_t>(100, 1)), recv = send;
    std::vector<WorkItem> items;
    for (int r = 0; r < 2; ++r)
      items.push_back(wholeCallItem(WorkKind::AllReduce, Algorithm::Ring, Protocol::LL128, ncclInt32, send[r].data(),
                                    recv[r].data(), 100, 0));
    if (groups) {
      ranks.run<LL128WarpLinesTag, int32_t>(items, RedOp<int32_t, RedKind::Sum>{0, 1});
      for (int r = 0; r < 2; ++r) EXPECT_NE(ranks.result(r), ncclSuccess) << "rank " << r;
    } else {
      ranks.run<LL128Tag, int32_t>(items, RedOp<int32_t, RedKind::Sum>{0, 1});
      for (int r = 0; r < 2; ++r) {
        ASSERT_EQ(ranks.result(r), ncclSuccess) << "rank " << r;
        EXPECT_EQ(recv[r], std::vector<int32_t>(100, 2));
      }
    }
  }
}

// A team waiting for data that never comes: an abort releases every thread of it, with
// the same outcome on each, and the connection's step counter is left alone.
TYPED_TEST(TeamProgramsTest, AbortReleasesTheWholeWaitingTeam) {
  TeamRanks ranks(2, TypeParam::kProtocol);
  ranks.routeRecvFromRing(1);
  std::vector<int32_t> recv(1000, 0);
  std::vector<WorkItem> items(2, wholeCallItem(WorkKind::Recv, Algorithm::Ring, TypeParam::kProtocol, ncclInt32,
                                               nullptr, recv.data(), recv.size(), 1));
  items[1].kind = WorkKind::LocalCopy;  // rank 1: a no-op copy of nothing, so only rank 0 waits
  items[1].range.count = 0;
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ranks.abort(0);
  });
  const auto start = std::chrono::steady_clock::now();
  ranks.run<TypeParam, int32_t>(items, RedOp<int32_t, RedKind::Sum>{0, 1});
  aborter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_NE(ranks.result(0), ncclSuccess) << "the aborted wait is recorded";
  EXPECT_EQ(ranks.result(1), ncclSuccess);
  for (int32_t v : recv) ASSERT_EQ(v, 0) << "nothing was received";
}

}  // namespace
}  // namespace chorus
