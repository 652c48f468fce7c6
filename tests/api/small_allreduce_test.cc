// Small AllReduce calls on 3 to 8 ranks (ring_algorithms.h's gatherAllReduce on the CPU
// executor: each rank folds every rank's value itself). Whatever the program, every rank
// must end with the same bits: a rank that folded in its own order (the order values
// reached it) would differ from the others in the last bits of some float sums, and data-
// parallel replicas would drift apart. Checked by gathering every rank's result, for
// counts on both sides of the gather's limit and of the test FIFOs' step sizes, in and
// out of place, for sum, avg (PreMulSum), prod, max over signed zeros and an integer avg
// (SumPostDiv, exact: checked against the value too), over P2P, SHM and NET, every protocol.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "harness/links.h"
#include "harness/order_sensitive.h"
#include "harness/protocol_settings.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "nccl.h"

namespace chorus_test {
namespace {

// Order-sensitive floats, or signed zeros for max (where the operand order decides).
float floatOf(int rank, size_t i, uint32_t seed, bool zeros) {
  if (zeros) return (mixOf(rank, i, seed) & 1) ? -0.0f : 0.0f;
  return orderSensitiveValue<float>(rank, i, seed);
}

// Rank `rank`'s int32 element i of tensor `seed`: sums of 8 of them stay in range.
int32_t intOf(int rank, size_t i, uint32_t seed) {
  return static_cast<int32_t>((i * 7919 + rank * 104729 + seed) % 2000003) - 1000001;
}

struct OpCase {
  const char* name;
  ncclDataType_t type;
  ncclRedOp_t op;
  bool zeros;  // max over +0 and -0: the operand order decides
};

const OpCase kOps[] = {{"sum", ncclFloat32, ncclSum, false},
                       {"avg", ncclFloat32, ncclAvg, false},
                       {"prod", ncclFloat32, ncclProd, false},
                       {"max of signed zeros", ncclFloat32, ncclMax, true},
                       {"int32 avg", ncclInt32, ncclAvg, false}};

// Up to 4096 elements: above the gather's limit at every rank count (8 KiB of values)
// and above one step of every protocol with the test FIFOs.
const size_t kCounts[] = {1, 7, 64, 255, 256, 257, 512, 1000, 2048, 2049, 4096};

// One call, out of place or in place; "" when every rank got rank 0's bits (and, for the
// integer avg, the exact value).
std::string oneCall(const RankContext& rc, const OpCase& c, size_t count, bool inPlace, uint32_t seed) {
  std::vector<uint32_t> send(count), recv(count);  // 4-byte elements: float or int32
  for (size_t i = 0; i < count; ++i) {
    if (c.type == ncclInt32) {
      send[i] = static_cast<uint32_t>(intOf(rc.rank, i, seed));
    } else {
      const float f = floatOf(rc.rank, i, seed, c.zeros);
      std::memcpy(&send[i], &f, sizeof(f));
    }
  }
  uint32_t* out = inPlace ? send.data() : recv.data();
  CHECK_NCCL(ncclAllReduce(send.data(), out, count, c.type, c.op, rc.comm, nullptr), "AllReduce");
  std::vector<uint32_t> all(count * rc.nranks);
  CHECK_NCCL(ncclAllGather(out, all.data(), count * 4, ncclUint8, rc.comm, nullptr), "AllGather of the results");
  const std::string what = std::string(c.name) + (inPlace ? " in place" : "") + " of " + std::to_string(count);
  for (int r = 1; r < rc.nranks; ++r) {
    for (size_t i = 0; i < count; ++i) {
      if (all[r * count + i] != all[i])
        return what + ": element " + std::to_string(i) + " has other bits on rank " + std::to_string(r) +
               " than on rank 0";
    }
  }
  if (c.type != ncclInt32) return "";
  // Rebuild every rank's element i, sum exactly, divide as NCCL does.
  for (size_t i = 0; i < count; ++i) {
    int64_t sum = 0;
    for (int r = 0; r < rc.nranks; ++r) sum += intOf(r, i, seed);
    const int32_t expected = static_cast<int32_t>(sum / rc.nranks);  // NCCL: sum, then divide (truncating)
    if (static_cast<int32_t>(out[i]) != expected)
      return what + ": element " + std::to_string(i) + " is " + std::to_string(static_cast<int32_t>(out[i])) +
             ", expected " + std::to_string(expected);
  }
  return "";
}

struct Slice {
  Link link;
  int nranks;
  const char* proto;
  int channels;
};

std::string sliceName(const Slice& s) {
  return std::string(linkName(s.link)) + "_" + std::to_string(s.nranks) + "ranks_" + s.proto + "_" +
         std::to_string(s.channels) + "ch";
}

void PrintTo(const Slice& s, std::ostream* out) { *out << sliceName(s); }

class SmallAllReduceTest : public ::testing::TestWithParam<Slice> {};

TEST_P(SmallAllReduceTest, EveryRankGetsTheSameBits) {
  const Slice& s = GetParam();
  ScopedEnv env;
  env.set("NCCL_ALGO", "Ring");  // forced: the call spreads over every channel
  env.set("NCCL_PROTO", s.proto);
  applyFifoSettings(env, FifoSettings{8, s.channels});
  forceLink(env, s.link);
  EXPECT_RANKS_OK(runRanks(launchModeOf(s.link), s.nranks, [](const RankContext& rc) {
    uint32_t seed = 1;
    for (const OpCase& c : kOps) {
      for (size_t count : kCounts) {
        for (bool inPlace : {false, true}) {
          const std::string why = oneCall(rc, c, count, inPlace, seed++);
          if (!why.empty()) return RankOutcome::fail(why);
        }
      }
    }
    return RankOutcome::pass();
  }));
}

std::vector<Slice> slices() {
  std::vector<Slice> out;
  for (const char* proto : {"Simple", "LL", "LL128"}) {
    for (int nranks : {3, 4, 5, 8}) out.push_back(Slice{Link::kP2p, nranks, proto, nranks == 5 ? 2 : 1});
    out.push_back(Slice{Link::kShm, 4, proto, 1});
    out.push_back(Slice{Link::kNet, 3, proto, 2});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Slices, SmallAllReduceTest, ::testing::ValuesIn(slices()),
                         [](const auto& info) { return sliceName(info.param); });

}  // namespace
}  // namespace chorus_test
