#include "perf_common.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "perf_data.h"
#include "perf_memory.h"
#include "perf_options.h"
#include "perf_world.h"

namespace chorus::perf {
namespace {

[[noreturn]] void ncclFailure(const char* call, ncclResult_t result, ncclComm_t comm, int rank, const char* file,
                              int line) {
  const char* last = ncclGetLastError(comm);
  std::fprintf(stderr, "%s:%d rank %d: NCCL failure in %s: %s (%d) - last error: %s\n", file, line, rank, call,
               ncclGetErrorString(result), static_cast<int>(result), last != nullptr && last[0] ? last : "(none)");
  abortRun();
}

// ncclInProgress is not a failure: a non-blocking communicator finishes later (see waitComplete).
#define PERF_NCCL(call, comm, rank)                                       \
  do {                                                                    \
    ncclResult_t perfResult = (call);                                     \
    if (perfResult != ncclSuccess && perfResult != ncclInProgress)        \
      ncclFailure(#call, perfResult, (comm), (rank), __FILE__, __LINE__); \
  } while (0)

// A buffer from ncclMemAlloc (device memory where a GPU is present, else host memory),
// freed with ncclMemFree.
class NcclBuffer {
 public:
  NcclBuffer() = default;
  NcclBuffer(const NcclBuffer&) = delete;
  NcclBuffer& operator=(const NcclBuffer&) = delete;
  ~NcclBuffer() { release(); }

  void allocate(size_t bytes, int rank) {
    release();
    PERF_NCCL(ncclMemAlloc(&data_, bytes), nullptr, rank);
  }
  void release() {
    if (data_ != nullptr) {
      ncclResult_t result = ncclMemFree(data_);
      if (result != ncclSuccess) std::fprintf(stderr, "ncclMemFree failed: %s\n", ncclGetErrorString(result));
    }
    data_ = nullptr;
  }
  char* get() const { return static_cast<char*>(data_); }

 private:
  void* data_ = nullptr;
};

// One rank this process drives. The communicator is destroyed by perfMain after the
// threads end, as nccl-tests does (one thread destroying every local communicator).
struct RankState {
  int rank = 0;
  int local = 0;  // its index among this process's ranks (its GPU: perf_memory.h)
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;     // its own, with device buffers
  NcclBuffer send;                   // maxBytes
  NcclBuffer recv;                   // maxBytes
  void* sendRegistration = nullptr;  // -R 1: ncclCommRegister's handles
  void* recvRegistration = nullptr;
  ncclRedOp_t op = ncclSum;
  bool opCreated = false;  // op came from ncclRedOpCreatePreMulSum
};

// Barriers and reductions among the threads of this process, then across processes
// (thread 0 speaks for the process).
class ThreadTeam {
 public:
  ThreadTeam(int nThreads, const PerfWorld& world) : barrier_(nThreads), slots_(nThreads), world_(world) {}

  void syncAll(int tid) {
    barrier_.arrive_and_wait();
    if (tid == 0) world_.barrier();
    barrier_.arrive_and_wait();
  }

  double combineTimes(int tid, double seconds, AverageMode mode) {
    slots_[tid] = seconds;
    barrier_.arrive_and_wait();
    if (tid == 0) {
      double total = 0, lowest = slots_[0], highest = slots_[0];
      for (double s : slots_) total += s, lowest = std::min(lowest, s), highest = std::max(highest, s);
      switch (mode) {
        case AverageMode::Rank0:
          result_ = world_.sum(world_.procRank() == 0 ? slots_[0] : 0.0);
          break;
        case AverageMode::Mean:
          result_ = world_.sum(total) / (double(slots_.size()) * world_.procCount());
          break;
        case AverageMode::Min:
          result_ = world_.min(lowest);
          break;
        case AverageMode::Max:
          result_ = world_.max(highest);
          break;
      }
    }
    barrier_.arrive_and_wait();
    return result_;
  }

  int64_t sumCounts(int tid, int64_t value) {
    slots_[tid] = static_cast<double>(value);
    barrier_.arrive_and_wait();
    if (tid == 0) {
      int64_t local = 0;
      for (double s : slots_) local += static_cast<int64_t>(s);
      result_ = static_cast<double>(world_.sum(local));
    }
    barrier_.arrive_and_wait();
    return static_cast<int64_t>(result_);
  }

 private:
  std::barrier<> barrier_;
  std::vector<double> slots_;
  double result_ = 0;
  const PerfWorld& world_;
};

struct Run {
  const CollectiveSpec& spec;
  const PerfOptions& options;
  const PerfWorld& world;
  int nranks;
  ThreadTeam team;
  bool printingProcess;  // process 0, whose thread 0 prints the table
  int64_t totalWrong = 0;
  double busBwSum = 0;
  int busBwCount = 0;
};

// Waits until every communicator of the thread has finished its work.
void waitComplete(std::vector<RankState>& ranks) {
  for (RankState& r : ranks) {
    syncStream(r.stream);
    ncclResult_t state = ncclInProgress;
    while (true) {
      PERF_NCCL(ncclCommGetAsyncError(r.comm, &state), r.comm, r.rank);
      if (state != ncclInProgress) break;
      sched_yield();
    }
    if (state != ncclSuccess) ncclFailure("(asynchronous error)", state, r.comm, r.rank, __FILE__, __LINE__);
  }
}

struct Placement {
  BufferCounts counts;
  bool inPlace;
  size_t typeBytes;
  char* sendOf(const RankState& r) const {
    return inPlace ? r.recv.get() + counts.sendInplaceOffset * r.rank * typeBytes : r.send.get();
  }
  char* recvOf(const RankState& r) const {
    return r.recv.get() + (inPlace ? counts.recvInplaceOffset * r.rank * typeBytes : 0);
  }
};

// One group of collectives: every rank of this thread, aggIters times each.
void launchGroup(Run& run, std::vector<RankState>& ranks, const Placement& at, ncclDataType_t type, int aggIters) {
  PERF_NCCL(ncclGroupStart(), nullptr, ranks[0].rank);
  for (int a = 0; a < aggIters; ++a) {
    for (RankState& r : ranks) {
      LaunchArgs args{at.sendOf(r),     at.recvOf(r), at.counts.param, type,   r.op,
                      run.options.root, r.rank,       run.nranks,      r.comm, r.stream};
      PERF_NCCL(run.spec.launch(args), r.comm, r.rank);
    }
  }
  PERF_NCCL(ncclGroupEnd(), nullptr, ranks[0].rank);
}

// Seconds per iteration on this thread (host time to the last launch with -C).
double timeIterations(Run& run, int tid, std::vector<RankState>& ranks, const Placement& at, ncclDataType_t type) {
  const PerfOptions& o = run.options;
  run.team.syncAll(tid);
  auto start = std::chrono::steady_clock::now();
  for (int iter = 0; iter < o.iters; ++iter) {
    if (o.blocking) {
      for (int a = 0; a < o.aggIters; ++a) {
        launchGroup(run, ranks, at, type, 1);
        waitComplete(ranks);
      }
    } else {
      launchGroup(run, ranks, at, type, o.aggIters);
    }
  }
  auto launched = std::chrono::steady_clock::now();
  waitComplete(ranks);
  auto done = std::chrono::steady_clock::now();
  double seconds = std::chrono::duration<double>((o.reportCpuTime ? launched : done) - start).count();
  return seconds / (double(o.iters) * o.aggIters);
}

// The rank's input in its buffer, made on the host.
void fillInputBuffer(const InputPattern& pattern, const RankState& r, void* buffer, size_t count, size_t typeBytes) {
  if (!deviceBuffers()) return fillInput(pattern, r.rank, buffer, count);
  std::vector<char> host(count * typeBytes);
  fillInput(pattern, r.rank, host.data(), count);
  copyBytes(buffer, host.data(), host.size(), r.stream);
}

// Fresh inputs, poisoned outputs, one run, then every received element against the host's expectation.
int64_t checkOnce(Run& run, std::vector<RankState>& ranks, const Placement& at, const InputPattern& pattern) {
  const BufferCounts& c = at.counts;
  for (RankState& r : ranks) {
    size_t extent =
        at.inPlace ? std::max(c.recv + c.recvInplaceOffset * r.rank, c.send + c.sendInplaceOffset * r.rank) : c.recv;
    fillBuffer(r.recv.get(), kPoisonByte, extent * at.typeBytes, r.stream);
    fillInputBuffer(pattern, r, at.sendOf(r), c.send, at.typeBytes);
  }
  launchGroup(run, ranks, at, pattern.type, 1);
  waitComplete(ranks);
  int64_t wrong = 0;
  std::vector<char> received;
  for (RankState& r : ranks) {
    received.resize(c.recv * at.typeBytes);
    copyBytes(received.data(), at.recvOf(r), received.size(), r.stream);
    const char* got = received.data();
    for (size_t i = 0; i < c.recv; ++i) {
      ElementSource source = run.spec.source(i, r.rank, run.nranks, run.options.root, c.param);
      if (source.kind == ElementSource::kUnchecked) continue;
      ExpectedValue want = source.kind == ElementSource::kReduce ? reducedValue(pattern, source.index)
                                                                 : copiedValue(pattern, source.rank, source.index);
      if (!elementMatches(pattern, got + i * at.typeBytes, want)) ++wrong;
    }
  }
  return wrong;
}

std::string timeText(double microseconds) {
  char text[32];
  const char* format = microseconds >= 10000.0 ? "%7.0f" : microseconds >= 100.0 ? "%7.1f" : "%7.2f";
  std::snprintf(text, sizeof(text), format, microseconds);
  return text;
}

void runSize(Run& run, int tid, std::vector<RankState>& ranks, size_t bytes, ncclDataType_t type, PerfOp op) {
  const size_t typeBytes = typeSize(type);
  const BufferCounts counts = run.spec.counts(bytes / typeBytes, run.nranks);
  const InputPattern pattern = makeInputPattern(type, op, run.nranks);
  const bool printer = run.printingProcess && tid == 0;
  if (printer) {
    std::printf("%12zu  %12zu  %8s  %6s  %6d", std::max(counts.send, counts.recv) * typeBytes, counts.param,
                typeName(type), opName(op), run.spec.usesRoot ? run.options.root : -1);
    std::fflush(stdout);
  }
  for (bool inPlace : {false, true}) {
    Placement at{counts, inPlace, typeBytes};
    // Timing runs see valid inputs too (NaNs could make floating reductions slower).
    for (RankState& r : ranks) fillInputBuffer(pattern, r, at.sendOf(r), counts.send, typeBytes);
    double seconds = run.team.combineTimes(tid, timeIterations(run, tid, ranks, at, type), run.options.average);
    const bool check = run.options.check && (!inPlace || run.spec.checksInPlace);
    int64_t wrong = 0;
    if (check) wrong = run.team.sumCounts(tid, checkOnce(run, ranks, at, pattern));
    double algBytes = double(counts.param * typeBytes) * (run.spec.algBytesTimesRanks ? run.nranks : 1);
    double algBw = seconds > 0 ? algBytes / 1.0e9 / seconds : 0;
    double busBw = algBw * run.spec.busBwFactor(run.nranks);
    if (printer) {
      if (check)
        std::printf("  %7s  %6.2f  %6.2f  %5g", timeText(seconds * 1e6).c_str(), algBw, busBw, double(wrong));
      else
        std::printf("  %7s  %6.2f  %6.2f  %5s", timeText(seconds * 1e6).c_str(), algBw, busBw, "N/A");
      std::fflush(stdout);
      run.totalWrong += wrong;
      run.busBwSum += busBw;
      ++run.busBwCount;
    }
  }
  if (printer) std::printf("\n");
}

// MulSum needs an op created on each communicator; the built-in ops need nothing.
void setOp(std::vector<RankState>& ranks, ncclDataType_t type, PerfOp op) {
  for (RankState& r : ranks) {
    if (op == PerfOp::MulSum) {
      unsigned char scalar[8];
      mulSumScalar(type, scalar);
      PERF_NCCL(ncclRedOpCreatePreMulSum(&r.op, scalar, type, ncclScalarHostImmediate, r.comm), r.comm, r.rank);
      r.opCreated = true;
    } else {
      r.op = builtinRedOp(op);
    }
  }
}

void clearOp(std::vector<RankState>& ranks) {
  for (RankState& r : ranks) {
    if (r.opCreated) PERF_NCCL(ncclRedOpDestroy(r.op, r.comm), r.comm, r.rank);
    r.opCreated = false;
  }
}

void initComms(std::vector<RankState*>& ranks, int nranks, const ncclUniqueId& id, int perProcess) {
  PERF_NCCL(ncclGroupStart(), nullptr, -1);
  for (RankState* r : ranks) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    useDeviceOf(r->local, perProcess);  // NCCL takes the current device
    PERF_NCCL(ncclCommInitRankConfig(&r->comm, nranks, id, r->rank, &config), nullptr, r->rank);
  }
  PERF_NCCL(ncclGroupEnd(), nullptr, -1);
}

void threadMain(Run& run, int tid, std::vector<RankState>& ranks, const ncclUniqueId& id) {
  const PerfOptions& o = run.options;
  if (o.parallelInit) {
    std::vector<RankState*> mine;
    for (RankState& r : ranks) mine.push_back(&r);
    initComms(mine, run.nranks, id, o.nThreads * o.nGpus);
  }
  for (RankState& r : ranks) {
    size_t bytes = std::max<size_t>(o.maxBytes, 64);
    useDeviceOf(r.local, o.nThreads * o.nGpus);
    r.stream = createStream();
    r.send.allocate(bytes, r.rank);
    r.recv.allocate(bytes, r.rank);
    if (o.localRegister) {
      PERF_NCCL(ncclCommRegister(r.comm, r.send.get(), bytes, &r.sendRegistration), r.comm, r.rank);
      PERF_NCCL(ncclCommRegister(r.comm, r.recv.get(), bytes, &r.recvRegistration), r.comm, r.rank);
    }
  }
  const std::vector<size_t> sizes = sweepSizes(o);
  const std::vector<PerfOp> noOp = {PerfOp::None};
  for (ncclDataType_t type : o.types) {
    for (PerfOp op : run.spec.usesOp ? o.ops : noOp) {
      setOp(ranks, type, op);
      // Warm up at the largest size, as nccl-tests does.
      const size_t typeBytes = typeSize(type);
      Placement warm{run.spec.counts(o.maxBytes / typeBytes, run.nranks), false, typeBytes};
      for (int i = 0; i < o.warmupIters; ++i) launchGroup(run, ranks, warm, type, 1);
      waitComplete(ranks);
      for (size_t bytes : sizes) runSize(run, tid, ranks, bytes, type, op);
      clearOp(ranks);
    }
  }
  run.team.syncAll(tid);
  for (RankState& r : ranks) {
    if (r.sendRegistration != nullptr) PERF_NCCL(ncclCommDeregister(r.comm, r.sendRegistration), r.comm, r.rank);
    if (r.recvRegistration != nullptr) PERF_NCCL(ncclCommDeregister(r.comm, r.recvRegistration), r.comm, r.rank);
    r.send.release();
    r.recv.release();
    destroyStream(r.stream);
  }
}

const char* programName(const char* argv0) {
  const char* slash = std::strrchr(argv0, '/');
  return slash ? slash + 1 : argv0;
}

void printHeader(const PerfOptions& o, const PerfWorld& world, const char* program) {
  int libraryVersion = 0;
  ncclGetVersion(&libraryVersion);
  if (world.procRank() == 0) {
    std::printf("# Chorus perf (nccl-tests compatible) nccl-headers=%d nccl-library=%d\n", NCCL_VERSION_CODE,
                libraryVersion);
    std::printf("# Collective test starting: %s\n", programName(program));
    std::printf(
        "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: "
        "%d validation: %d graph: 0\n#\n# Using devices\n",
        o.nThreads, o.nGpus, o.minBytes, o.maxBytes, o.stepFactor > 1 ? static_cast<size_t>(o.stepFactor) : o.stepBytes,
        o.stepFactor > 1 ? "factor" : "bytes", o.warmupIters, o.iters, o.aggIters, o.check);
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string lines;
  const int perProc = o.nThreads * o.nGpus;
  for (int local = 0; local < perProc; ++local) {
    char line[512];
    std::snprintf(line, sizeof(line), "#  Rank %2d Group  0 Pid %6d on %10s device %2d %s\n",
                  world.procRank() * perProc + local, static_cast<int>(getpid()), host, local, memoryText());
    lines += line;
  }
  for (const std::string& text : world.gatherLines(lines)) std::fputs(text.c_str(), stdout);
  if (world.procRank() == 0) {
    std::printf("#\n# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "",
                "", "", "", "");
    std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count", "type", "redop",
                "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "",
                "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    std::fflush(stdout);
  }
}

}  // namespace

int perfMain(int argc, char** argv, const CollectiveSpec& spec) {
  PerfWorld world(&argc, &argv);
  PerfOptions options;
  if (int code = parsePerfOptions(argc, argv, &options); code != 0) return code < 0 ? 0 : code;
  const int perProc = options.nThreads * options.nGpus;
  const int nranks = world.procCount() * perProc;
  if (spec.usesRoot && options.root >= nranks) {
    std::fprintf(stderr, "%s: root %d is out of range for %d ranks\n", argv[0], options.root, nranks);
    return 1;
  }
  printHeader(options, world, argv[0]);

  ncclUniqueId id{};
  if (world.procRank() == 0) PERF_NCCL(ncclGetUniqueId(&id), nullptr, 0);
  world.broadcastId(&id);

  std::vector<std::vector<RankState>> threadRanks(options.nThreads);
  for (auto& ranks : threadRanks) ranks = std::vector<RankState>(options.nGpus);
  std::vector<RankState*> allRanks;
  for (int t = 0; t < options.nThreads; ++t)
    for (int g = 0; g < options.nGpus; ++g) {
      threadRanks[t][g].local = t * options.nGpus + g;
      threadRanks[t][g].rank = world.procRank() * perProc + threadRanks[t][g].local;
      allRanks.push_back(&threadRanks[t][g]);
    }
  // Without -p the main thread creates every local communicator in one group.
  if (!options.parallelInit) initComms(allRanks, nranks, id, perProc);

  Run run{spec, options, world, nranks, ThreadTeam(options.nThreads, world), world.procRank() == 0};
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < options.nThreads; ++t)
      threads.emplace_back([&run, &threadRanks, &id, t] { threadMain(run, t, threadRanks[t], id); });
  }
  for (RankState* r : allRanks) PERF_NCCL(ncclCommDestroy(r->comm), nullptr, r->rank);

  int64_t wrong = world.sum(run.totalWrong);
  if (world.procRank() == 0) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong), wrong ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %g \n#\n", run.busBwCount ? run.busBwSum / run.busBwCount : 0.0);
    std::printf("# Collective test concluded: %s\n", programName(argv[0]));
    std::fflush(stdout);
  }
  return wrong ? 1 : 0;
}

}  // namespace chorus::perf
