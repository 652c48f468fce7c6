// 100 000 small calls of random collectives and sizes on 4 thread ranks (10 000
// on 3 process ranks), with the tuner free to choose, then a quarter as many with each
// protocol forced: no hang, no wrong byte.
//
// Every rank draws the same sequence from one seed (CHORUS_STRESS_SEED overrides
// it to reproduce another run). One call in ten is issued alone, the others in
// groups of 2 to 16 inside ncclGroupStart/End, each with its own buffers; every
// call's whole result is checked after its group, plus guard bytes past each
// receive buffer.
//
// Inputs are cheap to check: element i of rank r in call c is h(c, i) + r with
// h < 32, so every reduction over the ranks has a closed form (sum n·h + n(n-1)/2,
// max h + n - 1, min h) that is exact in every type used, uint8 included.
//
// Sizes are log-uniform from 0 to 64 KiB, with one call in 64 between 64 and
// 512 KiB. The calibrated tuner picks Simple for most calls and LL128 for some (the
// tuning log shows which); the forced runs make sure LL meets the same stream too.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "harness/failure_log.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "harness/tuning_log.h"
#include "nccl.h"

namespace chorus_test {
namespace {

constexpr size_t kSmallCallBytes = 64 << 10;
constexpr size_t kMaxCallBytes = 512 << 10;  // one call in 64 is larger, so the tuner picks Simple too
constexpr size_t kGuardBytes = 64;
constexpr unsigned char kSentinel = 0xFF;  // -1 / 255 / NaN: no result takes this value
constexpr int kMaxCallsPerGroup = 16;

uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t stressSeed() {
  const char* value = std::getenv("CHORUS_STRESS_SEED");
  return value ? std::strtoull(value, nullptr, 0) : 0x5EED2025ull;
}

enum class Kind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kSendRecv };
const char* kindName(Kind kind) {
  static const char* const kNames[] = {"AllReduce", "ReduceScatter", "AllGather", "Broadcast", "Reduce", "SendRecv"};
  return kNames[static_cast<int>(kind)];
}

struct TypeInfo {
  ncclDataType_t type;
  const char* name;
  size_t size;
};
const TypeInfo kTypes[] = {
    {ncclInt32, "int32", 4}, {ncclUint8, "uint8", 1}, {ncclInt64, "int64", 8}, {ncclFloat32, "float32", 4}};
const ncclRedOp_t kOps[] = {ncclSum, ncclMax, ncclMin};
const char* const kOpNames[] = {"sum", "max", "min"};

// One call of the sequence, identical on every rank.
struct Call {
  uint64_t index;
  Kind kind;
  int typeIndex;
  int opIndex;
  size_t count;  // per rank for AllGather and ReduceScatter
  int root;      // Broadcast, Reduce
  int shift;     // SendRecv: send to rank + shift
  bool inPlace;
};

Call drawCall(uint64_t& rng, uint64_t index, int nranks) {
  Call c{};
  c.index = index;
  c.kind = static_cast<Kind>(splitmix(rng) % 6);
  c.typeIndex = static_cast<int>(splitmix(rng) % 4);
  c.opIndex = static_cast<int>(splitmix(rng) % 3);
  // Log-uniform bytes in [0, 64 KiB) (2^k-sized ranges for k = 0..16); one call in 64
  // uniform in [64 KiB, 512 KiB), where the tuner picks Simple for some collectives.
  size_t bytes;
  if (splitmix(rng) % 64 != 0) {
    const int log2Bytes = static_cast<int>(splitmix(rng) % 17);
    bytes = splitmix(rng) % (size_t(1) << log2Bytes);
  } else {
    bytes = kSmallCallBytes + splitmix(rng) % (kMaxCallBytes - kSmallCallBytes);
  }
  // AllGather and ReduceScatter: the whole (nranks x count) buffer is the drawn size.
  if (c.kind == Kind::kAllGather || c.kind == Kind::kReduceScatter) bytes /= nranks;
  c.count = bytes / kTypes[c.typeIndex].size;
  c.root = static_cast<int>(splitmix(rng) % nranks);
  c.shift = 1 + static_cast<int>(splitmix(rng) % (nranks - 1));
  c.inPlace = splitmix(rng) % 4 == 0 && c.kind != Kind::kSendRecv;
  return c;
}

// h(call, i) in [0, 32).
inline uint32_t baseValue(uint64_t call, size_t i) {
  uint32_t x = static_cast<uint32_t>(i) * 0x9E3779B1u ^ static_cast<uint32_t>(call) * 0x85EBCA77u;
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  return x >> 27;
}

template <typename T>
void fillValues(T* out, size_t count, uint64_t call, int rank, size_t indexBase = 0) {
  for (size_t i = 0; i < count; ++i) out[i] = static_cast<T>(baseValue(call, indexBase + i) + rank);
}

double reduced(uint32_t h, int opIndex, int nranks) {
  switch (opIndex) {
    case 0:
      return double(nranks) * h + nranks * (nranks - 1) / 2;
    case 1:
      return h + nranks - 1;
    default:
      return h;
  }
}

// Buffers of one call slot of a group: [send | guard], [recv | guard].
struct CallBuffers {
  std::vector<unsigned char> send, recv;
  void* sendPtr = nullptr;
  void* recvPtr = nullptr;
  size_t recvBytes = 0;  // bytes the call may write at recvPtr (its guard follows)
};

class StressRank {
 public:
  StressRank(ncclComm_t comm, int rank, int nranks) : comm_(comm), rank_(rank), nranks_(nranks) {
    for (CallBuffers& b : buffers_) {
      b.send.resize(kMaxCallBytes + kGuardBytes);
      b.recv.resize(kMaxCallBytes + kGuardBytes);
    }
  }

  // Runs `calls` calls; stops early only when a call or group fails (the comm may be broken).
  void run(uint64_t calls, uint64_t seed, FailureLog& log) {
    uint64_t rng = seed;
    std::vector<Call> group;
    for (uint64_t index = 0; index < calls; index += group.size()) {
      group.clear();
      // One call in ten alone, the others in groups of 2 to 16 that mix collectives and
      // send/recv in one launch: groups keep 100 000 calls within about a minute when
      // another test competes for the 2 cores (alone they take ~8 s either way).
      const uint64_t groupSize = splitmix(rng) % 10 == 0 ? 1 : 2 + splitmix(rng) % (kMaxCallsPerGroup - 1);
      for (uint64_t k = index; k < calls && group.size() < groupSize; ++k) {
        group.push_back(drawCall(rng, k, nranks_));
      }
      for (size_t g = 0; g < group.size(); ++g) prepare(group[g], buffers_[g]);
      ncclResult_t start = ncclGroupStart();
      std::vector<ncclResult_t> issued(group.size());
      for (size_t g = 0; g < group.size(); ++g) issued[g] = issue(group[g], buffers_[g]);
      ncclResult_t end = ncclGroupEnd();
      bool ok = start == ncclSuccess && end == ncclSuccess;
      for (size_t g = 0; g < group.size(); ++g) {
        if (issued[g] != ncclSuccess) ok = false;
        if (issued[g] != ncclSuccess || end != ncclSuccess)
          log.add(describe(group[g]) + ": call " + resultName(issued[g]) + ", GroupEnd " + resultName(end));
      }
      if (!ok) return;
      for (size_t g = 0; g < group.size(); ++g) verify(group[g], buffers_[g], log);
    }
  }

 private:
  std::string describe(const Call& c) const {
    std::string text = "call " + std::to_string(c.index) + " " + kindName(c.kind) + " " + kTypes[c.typeIndex].name +
                       " count=" + std::to_string(c.count);
    if (c.kind == Kind::kAllReduce || c.kind == Kind::kReduceScatter || c.kind == Kind::kReduce)
      text += std::string(" op=") + kOpNames[c.opIndex];
    if (c.kind == Kind::kBroadcast || c.kind == Kind::kReduce) text += " root=" + std::to_string(c.root);
    if (c.kind == Kind::kSendRecv) text += " shift=" + std::to_string(c.shift);
    if (c.inPlace) text += " in-place";
    return text + " rank " + std::to_string(rank_);
  }

  void prepare(const Call& c, CallBuffers& b) {
    const size_t size = kTypes[c.typeIndex].size;
    const size_t n = static_cast<size_t>(nranks_);
    size_t sendElements = c.count, recvElements = c.count;
    if (c.kind == Kind::kReduceScatter) sendElements = n * c.count;
    if (c.kind == Kind::kAllGather) recvElements = n * c.count;
    unsigned char* recvBase = b.recv.data();
    b.recvPtr = recvBase;
    b.sendPtr = c.inPlace ? recvBase : b.send.data();
    if (c.inPlace && c.kind == Kind::kAllGather) b.sendPtr = recvBase + rank_ * c.count * size;
    if (c.inPlace && c.kind == Kind::kReduceScatter) b.recvPtr = recvBase + rank_ * c.count * size;
    const size_t wholeRecv = (c.inPlace ? std::max(sendElements, recvElements) : recvElements) * size;
    std::memset(recvBase, kSentinel, wholeRecv + kGuardBytes);
    b.recvBytes = wholeRecv - (static_cast<unsigned char*>(b.recvPtr) - recvBase);
    dispatch(c.typeIndex,
             [&]<typename T>(T*) { fillValues(static_cast<T*>(b.sendPtr), sendElements, c.index, rank_); });
  }

  template <typename F>
  static void dispatch(int typeIndex, F&& f) {
    switch (typeIndex) {
      case 0:
        return f(static_cast<int32_t*>(nullptr));
      case 1:
        return f(static_cast<uint8_t*>(nullptr));
      case 2:
        return f(static_cast<int64_t*>(nullptr));
      default:
        return f(static_cast<float*>(nullptr));
    }
  }

  ncclResult_t issue(const Call& c, CallBuffers& b) {
    const ncclDataType_t type = kTypes[c.typeIndex].type;
    const ncclRedOp_t op = kOps[c.opIndex];
    switch (c.kind) {
      case Kind::kAllReduce:
        return ncclAllReduce(b.sendPtr, b.recvPtr, c.count, type, op, comm_, nullptr);
      case Kind::kReduceScatter:
        return ncclReduceScatter(b.sendPtr, b.recvPtr, c.count, type, op, comm_, nullptr);
      case Kind::kAllGather:
        return ncclAllGather(b.sendPtr, b.recvPtr, c.count, type, comm_, nullptr);
      case Kind::kBroadcast:
        return ncclBroadcast(b.sendPtr, b.recvPtr, c.count, type, c.root, comm_, nullptr);
      case Kind::kReduce:
        return ncclReduce(b.sendPtr, b.recvPtr, c.count, type, op, c.root, comm_, nullptr);
      case Kind::kSendRecv: {
        const int to = (rank_ + c.shift) % nranks_;
        const int from = (rank_ - c.shift + nranks_) % nranks_;
        ncclResult_t sent = ncclSend(b.sendPtr, c.count, type, to, comm_, nullptr);
        ncclResult_t received = ncclRecv(b.recvPtr, c.count, type, from, comm_, nullptr);
        return sent != ncclSuccess ? sent : received;
      }
    }
    return ncclInternalError;
  }

  void verify(const Call& c, const CallBuffers& b, FailureLog& log) {
    const auto* guard = static_cast<const unsigned char*>(b.recvPtr) + b.recvBytes;
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (guard[i] != kSentinel) {
        log.add(describe(c) + ": wrote past the receive buffer (guard byte " + std::to_string(i) + ")");
        break;
      }
    }
    if (c.kind == Kind::kReduce && rank_ != c.root) return;  // its receive buffer is undefined
    const int n = nranks_;
    size_t wrong = 0, firstIndex = 0;
    double firstGot = 0, firstWant = 0;
    dispatch(c.typeIndex, [&]<typename T>(T*) {
      const T* out = static_cast<const T*>(b.recvPtr);
      auto check = [&](size_t at, double want) {
        const double got = static_cast<double>(out[at]);
        if (got == want) return;
        if (wrong++ == 0) firstIndex = at, firstGot = got, firstWant = want;
      };
      switch (c.kind) {
        case Kind::kAllReduce:
        case Kind::kReduce:
          for (size_t i = 0; i < c.count; ++i) check(i, reduced(baseValue(c.index, i), c.opIndex, n));
          break;
        case Kind::kReduceScatter:
          for (size_t i = 0; i < c.count; ++i) check(i, reduced(baseValue(c.index, rank_ * c.count + i), c.opIndex, n));
          break;
        case Kind::kAllGather:
          for (int peer = 0; peer < n; ++peer)
            for (size_t i = 0; i < c.count; ++i) check(peer * c.count + i, double(baseValue(c.index, i)) + peer);
          break;
        case Kind::kBroadcast:
          for (size_t i = 0; i < c.count; ++i) check(i, double(baseValue(c.index, i)) + c.root);
          break;
        case Kind::kSendRecv: {
          const int from = (rank_ - c.shift + n) % n;
          for (size_t i = 0; i < c.count; ++i) check(i, double(baseValue(c.index, i)) + from);
          break;
        }
      }
    });
    if (wrong > 0) {
      log.add(describe(c) + ": element " + std::to_string(firstIndex) + " is " + std::to_string(firstGot) +
              ", expected " + std::to_string(firstWant) + " (" + std::to_string(wrong) + " wrong)");
    }
  }

  ncclComm_t comm_;
  int rank_;
  int nranks_;
  CallBuffers buffers_[kMaxCallsPerGroup];
};

// Runs the stress sequence; returns the wall time in seconds.
double runStress(LaunchMode mode, int nranks, uint64_t calls) {
  const uint64_t seed = stressSeed();
  const auto start = std::chrono::steady_clock::now();
  LaunchResult result = runRanks(
      mode, nranks,
      [&](const RankContext& context) {
        FailureLog log;
        StressRank(context.comm, context.rank, context.nranks).run(calls, seed, log);
        return log.outcome();
      },
      std::chrono::seconds(240));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(result.allOk()) << result.describe() << "seed " << seed << " (CHORUS_STRESS_SEED=" << seed
                              << " reproduces it)";
  return seconds;
}

// The tuner chooses freely (no NCCL_ALGO / NCCL_PROTO). The first `logged` calls run
// once with the TUNING log on, to show that every protocol and collective was used
// (logging all 100 000 would write ~100 MB); then the whole sequence runs.
void runStressWithFreeTuner(LaunchMode mode, int nranks, uint64_t calls, uint64_t logged) {
  ScopedEnv env;
  env.unset("NCCL_ALGO");
  env.unset("NCCL_PROTO");
  {
    TuningLogCapture log(env);
    const double seconds = runStress(mode, nranks, logged);
    std::printf("%llu calls on %d %s ranks, logging: %.1f s\n", static_cast<unsigned long long>(logged), nranks,
                launchModeName(mode), seconds);
    std::set<std::string> protocols, collectives;
    size_t lines = 0;
    for (const TuningChoice& choice : log.choices()) {
      protocols.insert(choice.proto);
      collectives.insert(choice.collective);
      ++lines;
    }
    EXPECT_EQ(protocols.count("Simple"), 1u) << "the calibrated tuner's usual choice";
    EXPECT_EQ(collectives.size(), 6u) << "collectives in the tuning log";
    EXPECT_GE(lines, logged * nranks) << "one tuning line per call and rank (two per send/recv pair)";
    env.unset("NCCL_DEBUG");  // logging off before the capture's files go away
  }
  if (calls > logged) {
    const double seconds = runStress(mode, nranks, calls);
    std::printf("%llu calls on %d %s ranks: %.1f s\n", static_cast<unsigned long long>(calls), nranks,
                launchModeName(mode), seconds);
  }
  for (const char* proto : {"LL", "LL128", "Simple"}) {
    env.set("NCCL_PROTO", proto);
    const double seconds = runStress(mode, nranks, calls / 4);
    std::printf("%llu calls on %d %s ranks, NCCL_PROTO=%s: %.1f s\n", static_cast<unsigned long long>(calls / 4),
                nranks, launchModeName(mode), proto, seconds);
  }
}

TEST(Stress, HundredThousandRandomCallsFourThreadRanks) {
  runStressWithFreeTuner(LaunchMode::kThreads, 4, 100000, 4000);
}

TEST(Stress, TenThousandRandomCallsThreeProcessRanks) {
  runStressWithFreeTuner(LaunchMode::kProcesses, 3, 10000, 10000);
}

}  // namespace
}  // namespace chorus_test
