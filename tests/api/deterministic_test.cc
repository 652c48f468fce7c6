// Deterministic mode (CHORUS_DETERMINISTIC=1): AllReduce, Reduce and ReduceScatter combine
// every element in the order rank 0, 1, ..., n-1, so the bits of a result depend on the
// ranks' values only.
//
// Every check compares the library's result, bit for bit, with that fold computed here
// ((x0 + x1) + x2) + ...: a tensor reduced alone, the same tensor inside a larger buffer at
// odd offsets (a PyTorch bucket), fused with another call in one group, by Reduce to every
// root and by ReduceScatter; on 3, 4 and 5 ranks, 1, 2, 3 and 8 channels, 2 and 8 steps,
// every protocol, NCCL_ALGO Ring and Tree, between threads (P2P) and processes (SHM, NET).
// The values span many exponents, so any other order changes some bits: the control test
// shows the default mode's ring differs from the fold on the same data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "harness/links.h"
#include "harness/order_sensitive.h"
#include "harness/protocol_settings.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "nccl.h"

namespace chorus_test {
namespace {

template <typename T>
std::vector<T> valuesOf(int rank, size_t count, uint32_t seed) {
  std::vector<T> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = orderSensitiveValue<T>(rank, i, seed);
  return v;
}

// The fold in rank order: what every element must be, bit for bit.
template <typename T>
T foldOf(int nranks, size_t i, uint32_t seed) {
  T acc = orderSensitiveValue<T>(0, i, seed);
  for (int r = 1; r < nranks; ++r) acc = acc + orderSensitiveValue<T>(r, i, seed);
  return acc;
}

template <typename T>
ncclDataType_t typeOf() {
  return sizeof(T) == 4 ? ncclFloat32 : ncclFloat64;
}

// "" when data[i] == fold(i) bitwise for every i; else the first difference.
template <typename T>
std::string compareWithFold(const char* what, const T* data, size_t count, int nranks, uint32_t seed) {
  for (size_t i = 0; i < count; ++i) {
    const T expected = foldOf<T>(nranks, i, seed);
    if (std::memcmp(&data[i], &expected, sizeof(T)) != 0)
      return std::string(what) + " (" + std::to_string(count) + " elements) element " + std::to_string(i) + ": " +
             std::to_string(data[i]) + ", the rank-order fold is " + std::to_string(expected);
  }
  return "";
}

// The tensor alone, out of place and in place.
template <typename T>
std::string allReduceAlone(const RankContext& rc, size_t count, uint32_t seed) {
  std::vector<T> send = valuesOf<T>(rc.rank, count, seed), recv(count);
  CHECK_NCCL(ncclAllReduce(send.data(), recv.data(), count, typeOf<T>(), ncclSum, rc.comm, nullptr), "AllReduce");
  CHECK_NCCL(ncclAllReduce(send.data(), send.data(), count, typeOf<T>(), ncclSum, rc.comm, nullptr), "in place");
  const std::string why = compareWithFold("AllReduce", recv.data(), count, rc.nranks, seed);
  return why.empty() ? compareWithFold("AllReduce in place", send.data(), count, rc.nranks, seed) : why;
}

// The tensor at `offset` in a bucket of other values, reduced as one call.
template <typename T>
std::string allReduceInBucket(const RankContext& rc, size_t count, size_t offset, uint32_t seed) {
  std::vector<T> bucket = valuesOf<T>(rc.rank, offset + count + 37, seed + 1000);
  const std::vector<T> tensor = valuesOf<T>(rc.rank, count, seed);
  std::copy(tensor.begin(), tensor.end(), bucket.begin() + offset);
  CHECK_NCCL(ncclAllReduce(bucket.data(), bucket.data(), bucket.size(), typeOf<T>(), ncclSum, rc.comm, nullptr),
             "AllReduce of the bucket");
  return compareWithFold("tensor in a bucket", bucket.data() + offset, count, rc.nranks, seed);
}

// The tensor in a group with another AllReduce (a fused launch).
template <typename T>
std::string allReduceFused(const RankContext& rc, size_t count, uint32_t seed) {
  std::vector<T> other = valuesOf<T>(rc.rank, 3 * count + 5, seed + 2000), tensor = valuesOf<T>(rc.rank, count, seed);
  CHECK_NCCL(ncclGroupStart(), "ncclGroupStart");
  CHECK_NCCL(ncclAllReduce(other.data(), other.data(), other.size(), typeOf<T>(), ncclSum, rc.comm, nullptr),
             "first AllReduce");
  CHECK_NCCL(ncclAllReduce(tensor.data(), tensor.data(), count, typeOf<T>(), ncclSum, rc.comm, nullptr),
             "second AllReduce");
  CHECK_NCCL(ncclGroupEnd(), "ncclGroupEnd");
  return compareWithFold("tensor fused in a group", tensor.data(), count, rc.nranks, seed);
}

// Reduce to every root: only the root's buffer holds the result.
template <typename T>
std::string reduceToEveryRoot(const RankContext& rc, size_t count, uint32_t seed) {
  const std::vector<T> send = valuesOf<T>(rc.rank, count, seed);
  std::vector<std::vector<T>> recvs(rc.nranks, std::vector<T>(count));
  for (int root = 0; root < rc.nranks; ++root) {
    CHECK_NCCL(ncclReduce(send.data(), recvs[root].data(), count, typeOf<T>(), ncclSum, root, rc.comm, nullptr),
               "Reduce");
  }
  return compareWithFold("Reduce to this rank", recvs[rc.rank].data(), count, rc.nranks, seed);
}

// ReduceScatter: block b of every rank's buffer is tensor `seed + b`; rank b gets its fold.
template <typename T>
std::string reduceScatter(const RankContext& rc, size_t count, uint32_t seed) {
  std::vector<T> send(count * rc.nranks), recv(count);
  for (int b = 0; b < rc.nranks; ++b) {
    const std::vector<T> block = valuesOf<T>(rc.rank, count, seed + b);
    std::copy(block.begin(), block.end(), send.begin() + b * count);
  }
  CHECK_NCCL(ncclReduceScatter(send.data(), recv.data(), count, typeOf<T>(), ncclSum, rc.comm, nullptr),
             "ReduceScatter");
  return compareWithFold("ReduceScatter block", recv.data(), count, rc.nranks, seed + rc.rank);
}

// Every form at every count: each rank makes the same calls whatever it finds (a rank that
// stopped early would leave the others waiting); the first difference is reported.
// Counts on both sides of the test FIFOs' step sizes (Simple 8 KiB, LL 1 KiB, LL128
// 1920 B per step at 8 steps) and of the channels' 64-element shares.
const size_t kCounts[] = {1, 7, 64, 257, 1000, 4099, 20000};

template <typename T>
std::string everyForm(const RankContext& rc) {
  uint32_t seed = 1;
  std::string first;
  for (size_t count : kCounts) {
    for (const std::string& why : {allReduceAlone<T>(rc, count, seed), allReduceInBucket<T>(rc, count, 3, seed),
                                   allReduceInBucket<T>(rc, count, 1001, seed), allReduceFused<T>(rc, count, seed),
                                   reduceToEveryRoot<T>(rc, count, seed), reduceScatter<T>(rc, count, seed)}) {
      if (first.empty()) first = why;
    }
    seed += 16;
  }
  return first;
}

RankOutcome outcomeOf(const std::string& why) { return why.empty() ? RankOutcome::pass() : RankOutcome::fail(why); }

struct Slice {
  Link link;
  int nranks;
  const char* algo;
  const char* proto;
  FifoSettings fifo;
};

std::string sliceName(const Slice& s) {
  return std::string(linkName(s.link)) + "_" + std::to_string(s.nranks) + "ranks_" + s.algo + "_" + s.proto + "_" +
         std::to_string(s.fifo.channels) + "ch_" + std::to_string(s.fifo.steps) + "steps";
}

void PrintTo(const Slice& s, std::ostream* out) { *out << sliceName(s); }

class DeterministicTest : public ::testing::TestWithParam<Slice> {};

TEST_P(DeterministicTest, EveryResultIsTheRankOrderFold) {
  const Slice& s = GetParam();
  ScopedEnv env;
  env.set("CHORUS_DETERMINISTIC", "1");
  env.set("NCCL_ALGO", s.algo);
  env.set("NCCL_PROTO", s.proto);
  applyFifoSettings(env, s.fifo);
  forceLink(env, s.link);
  EXPECT_RANKS_OK(runRanks(launchModeOf(s.link), s.nranks, [](const RankContext& rc) {
    std::string why = everyForm<float>(rc);
    if (why.empty()) why = everyForm<double>(rc);
    return outcomeOf(why);
  }));
}

// Channels, steps and rank counts crossed with every protocol and both algorithm settings.
std::vector<Slice> slices() {
  std::vector<Slice> out;
  const FifoSettings fifos[] = {{8, 1}, {2, 2}, {4, 3}, {8, 8}};
  int k = 0;
  for (const char* proto : {"Simple", "LL", "LL128"}) {
    for (const char* algo : {"Ring", "Tree"}) {
      for (const FifoSettings& fifo : fifos) {
        const int nranks = 3 + k % 3;
        const Link link = k % 4 == 3 ? Link::kShm : Link::kP2p;
        out.push_back(Slice{link, nranks, algo, proto, fifo});
        ++k;
      }
    }
  }
  for (const char* proto : {"Simple", "LL", "LL128"}) out.push_back(Slice{Link::kNet, 3, "Ring", proto, {4, 2}});
  // Two ranks: sums keep the tuned algorithm (one op per element, commutative bit for bit).
  out.push_back(Slice{Link::kP2p, 2, "Tree", "LL", {8, 2}});
  out.push_back(Slice{Link::kShm, 2, "Ring", "Simple", {4, 3}});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Slices, DeterministicTest, ::testing::ValuesIn(slices()),
                         [](const auto& info) { return sliceName(info.param); });

// The control: without deterministic mode a 4-rank ring reduces block b starting at rank
// b + 1, and on this data that gives other bits than the fold for some elements (so the
// checks above would see an order other than 0, 1, ..., n-1).
TEST(DeterministicControlTest, DefaultRingDiffersFromTheFold) {
  ScopedEnv env;
  env.set("NCCL_ALGO", "Ring");
  env.set("NCCL_PROTO", "Simple");
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, 4, [](const RankContext& rc) {
    const size_t count = 4096;
    std::vector<float> data = valuesOf<float>(rc.rank, count, 1);
    if (ncclAllReduce(data.data(), data.data(), count, ncclFloat32, ncclSum, rc.comm, nullptr) != ncclSuccess)
      return RankOutcome::fail("AllReduce failed");
    if (compareWithFold("default ring", data.data(), count, 4, 1).empty())
      return RankOutcome::fail("the default ring gave the rank-order fold everywhere: the data does not show order");
    return RankOutcome::pass();
  }));
}

// Two ranks and max: +0 against -0 is decided by operand order, which the default ring
// takes differently for the two halves of the buffer; the ordered program gives one
// answer for every element.
TEST(DeterministicMaxTest, SignedZerosGiveOneAnswerEverywhere) {
  ScopedEnv env;
  env.set("CHORUS_DETERMINISTIC", "1");
  env.set("NCCL_ALGO", "Ring");
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, 2, [](const RankContext& rc) {
    const size_t count = 4099;
    std::vector<float> data(count, rc.rank == 0 ? 0.0f : -0.0f);
    if (ncclAllReduce(data.data(), data.data(), count, ncclFloat32, ncclMax, rc.comm, nullptr) != ncclSuccess)
      return RankOutcome::fail("AllReduce failed");
    for (size_t i = 1; i < count; ++i)
      if (std::signbit(data[i]) != std::signbit(data[0]))
        return RankOutcome::fail("element " + std::to_string(i) + " has another sign than element 0");
    return RankOutcome::pass();
  }));
}

// Ranks that disagree about the mode would run different steps: init fails on every rank.
TEST(DeterministicAgreementTest, RanksThatDisagreeFailInit) {
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kProcesses, 3, [](int rank, int nranks, const ncclUniqueId& id) {
    setenv("CHORUS_DETERMINISTIC", rank == 2 ? "0" : "1", 1);
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
    if (r == ncclSuccess) {
      ncclCommDestroy(comm);
      return RankOutcome::fail("init succeeded although rank 2 is not deterministic");
    }
    if (r != ncclInvalidUsage) return RankOutcome::fail("init failed with " + resultName(r) + ", not ncclInvalidUsage");
    const char* last = ncclGetLastError(nullptr);
    if (std::string(last).find("CHORUS_DETERMINISTIC") == std::string::npos)
      return RankOutcome::fail(std::string("the error does not name CHORUS_DETERMINISTIC: ") + last);
    return RankOutcome::pass();
  }));
}

}  // namespace
}  // namespace chorus_test
