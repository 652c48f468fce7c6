// Shared by the peer benchmarks of bench/run_sweep.py: nccl-tests' size flags, the float-sum
// AllReduce sweep, its exact-integer correctness check, and tools/perf's row format, so every
// library's numbers come out of the same loop and parse with the same regex.
#pragma once

#include <getopt.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sweep_flags.h"

namespace bench {

// nccl-tests' sweep flags (tools/perf/sweep_flags.h) with the peer benchmarks' defaults.
struct PeerOptions : chorus::perf::SweepFlags {
  PeerOptions() {
    minBytes = 8;
    maxBytes = 64u << 20;
    stepFactor = 2;
    warmupIters = 5;
  }
  std::string store;  // -s: rendezvous directory (gloo_allreduce, oneccl_allreduce)
};

using chorus::perf::sweepSizes;

// Returns 0 to run, -1 after -h, 1 on a bad flag. `store` enables -s.
inline int parsePeerOptions(int argc, char** argv, PeerOptions* o, bool store) {
  const char* usage =
      "usage: %s [-b minbytes] [-e maxbytes] [-i stepbytes] [-f factor] [-n iters] [-w warmup] [-c check]%s\n"
      "  sizes take K/M/G suffixes; defaults -b 8 -e 64M -f 2 -n 20 -w 5 -c 1\n";
  const char* storeUsage = store ? " [-s store-dir]" : "";
  const std::string letters = std::string(chorus::perf::kSweepFlagLetters) + (store ? "s:h" : "h");
  int c;
  optind = 1;
  while ((c = getopt(argc, argv, letters.c_str())) != -1) {
    const chorus::perf::FlagParse sweep = chorus::perf::parseSweepFlag(c, optarg, o);
    if (sweep == chorus::perf::FlagParse::Bad) {
      std::fprintf(stderr, "%s: invalid value '%s' for -%c\n", argv[0], optarg, c);
      return 1;
    }
    if (sweep == chorus::perf::FlagParse::Ok) continue;
    switch (c) {
      case 's':
        o->store = optarg;
        break;
      case 'h':
        std::printf(usage, argv[0], storeUsage);
        return -1;
      default:
        std::fprintf(stderr, usage, argv[0], storeUsage);
        return 1;
    }
  }
  if (optind < argc || o->minBytes > o->maxBytes || o->maxBytes < sizeof(float)) {
    std::fprintf(stderr, usage, argv[0], storeUsage);
    return 1;
  }
  return 0;
}

// Page-aligned, zero-filled (so every page is touched before any timing) host memory.
struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
template <typename T>
using HostBuffer = std::unique_ptr<T[], FreeDeleter>;

template <typename T>
HostBuffer<T> allocateHost(size_t bytes) {
  const size_t rounded = std::max<size_t>((bytes + 4095) / 4096 * 4096, 4096);
  void* p = std::aligned_alloc(4096, rounded);
  if (p == nullptr) {
    std::fprintf(stderr, "out of memory allocating %zu bytes\n", rounded);
    std::exit(2);
  }
  std::memset(p, 0, rounded);
  return HostBuffer<T>(static_cast<T*>(p));
}

// Small integers per rank and element: every partial float sum is exact, and misplaced
// elements or blocks show up because the value depends on both.
inline float inputValue(int rank, size_t i) {
  return static_cast<float>((i * 7 + static_cast<size_t>(rank) * 13) % 17);
}

inline void fillInput(float* data, size_t count, int rank) {
  for (size_t i = 0; i < count; ++i) data[i] = inputValue(rank, i);
}

inline int64_t countWrong(const float* got, size_t count, int nranks) {
  int64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int r = 0; r < nranks; ++r) want += inputValue(r, i);
    if (got[i] != want) ++wrong;  // exact: both sides are sums of small integers
  }
  return wrong;
}

// What a peer library provides: one blocking float-sum AllReduce (send == recv means in place)
// and the few cross-rank operations the timing loop needs.
class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  virtual void allreduce(float* send, float* recv, size_t count) = 0;
  virtual void barrier() = 0;
  virtual double maxOverRanks(double value) = 0;
  virtual double sumOverRanks(double value) = 0;
};

inline std::string timeText(double microseconds) {
  char text[32];
  const char* format = microseconds >= 10000.0 ? "%7.0f" : microseconds >= 100.0 ? "%7.1f" : "%7.2f";
  std::snprintf(text, sizeof(text), format, microseconds);
  return text;
}

inline void printHeader(const char* program, const char* library, const PeerOptions& o, int nranks) {
  std::printf("# %s (%s), %d ranks, float sum AllReduce\n", program, library, nranks);
  if (o.stepFactor > 1)
    std::printf("# minBytes %zu maxBytes %zu step: %g(factor)", o.minBytes, o.maxBytes, o.stepFactor);
  else
    std::printf("# minBytes %zu maxBytes %zu step: %zu(bytes)", o.minBytes, o.maxBytes, o.stepBytes);
  std::printf(" warmup iters: %d iters: %d validation: %d\n", o.warmupIters, o.iters, o.check);
  std::printf("# time: per-iteration average of the slowest rank\n#\n");
  std::printf(
      "#                                                              out-of-place                       in-place\n");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count", "type", "redop",
              "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "", "",
              "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
}

// The whole sweep; rank 0 prints. Returns the exit status (1 when any element was wrong).
inline int runAllReduceSweep(Collective& coll, const PeerOptions& o, const char* program, const char* library) {
  const int rank = coll.rank(), nranks = coll.nranks();
  const bool printer = rank == 0;
  HostBuffer<float> send = allocateHost<float>(o.maxBytes), recv = allocateHost<float>(o.maxBytes);
  if (printer) printHeader(program, library, o, nranks);
  // Warm up at the largest size, as nccl-tests does.
  fillInput(send.get(), o.maxBytes / sizeof(float), rank);
  for (int i = 0; i < o.warmupIters; ++i) coll.allreduce(send.get(), recv.get(), o.maxBytes / sizeof(float));
  int64_t totalWrong = 0;
  double busBwSum = 0;
  int busBwCount = 0;
  for (size_t requested : sweepSizes(o)) {
    const size_t count = requested / sizeof(float), bytes = count * sizeof(float);
    if (printer) std::printf("%12zu  %12zu  %8s  %6s  %6d", bytes, count, "float", "sum", -1);
    for (bool inPlace : {false, true}) {
      float* in = inPlace ? recv.get() : send.get();
      fillInput(in, count, rank);  // timed runs see valid floats too
      coll.barrier();
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < o.iters; ++i) coll.allreduce(in, recv.get(), count);
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / o.iters;
      seconds = coll.maxOverRanks(seconds);
      int64_t wrong = 0;
      if (o.check) {
        fillInput(in, count, rank);
        if (!inPlace) std::memset(recv.get(), 0xff, bytes);  // NaN poison
        coll.allreduce(in, recv.get(), count);
        wrong = static_cast<int64_t>(coll.sumOverRanks(static_cast<double>(countWrong(recv.get(), count, nranks))));
      }
      double algBw = seconds > 0 ? static_cast<double>(bytes) / 1.0e9 / seconds : 0;
      double busBw = algBw * 2.0 * (nranks - 1) / nranks;
      if (printer) {
        std::string time = timeText(seconds * 1e6);
        if (o.check)
          std::printf("  %7s  %6.2f  %6.2f  %5g", time.c_str(), algBw, busBw, static_cast<double>(wrong));
        else
          std::printf("  %7s  %6.2f  %6.2f  %5s", time.c_str(), algBw, busBw, "N/A");
        std::fflush(stdout);
      }
      totalWrong += wrong;
      busBwSum += busBw;
      ++busBwCount;
    }
    if (printer) std::printf("\n");
  }
  if (printer) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(totalWrong), totalWrong ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %g \n#\n", busBwCount ? busBwSum / busBwCount : 0.0);
    std::fflush(stdout);
  }
  return totalWrong ? 1 : 0;
}

}  // namespace bench
