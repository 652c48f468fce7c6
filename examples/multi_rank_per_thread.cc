// NCCL documentation, example 3 on threads: several threads, each driving several ranks.
//
// The unique id is created once and shared; every thread creates its own ranks'
// communicators with ncclCommInitRank inside a group (a rank's init waits for its
// peers, so a thread must not init its ranks one after another), then runs an in-place
// AllReduce on all of them inside a group.
//
// Its buffers are host memory, for the CPU executor: on a machine with a GPU, where new
// communicators are GPU communicators, run it with CHORUS_EXECUTOR=cpu.
//
//   usage: multi_rank_per_thread [threads=2] [ranks per thread=2] [count=262144]
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "nccl.h"

namespace {

bool ok(ncclResult_t result, const char* call, int thread) {
  if (result == ncclSuccess) return true;
  std::fprintf(stderr, "thread %d: %s failed: %s (%s)\n", thread, call, ncclGetErrorString(result),
               ncclGetLastError(nullptr));
  return false;
}
#define NCCL_OK(call, thread) ok((call), #call, (thread))

// Returns the number of wrong elements, or -1 if an NCCL call failed.
long driveRanks(int thread, int ranksPerThread, int nranks, size_t count, const ncclUniqueId& id) {
  std::vector<ncclComm_t> comms(ranksPerThread);
  std::vector<std::vector<int>> buffers(ranksPerThread, std::vector<int>(count));
  const int firstRank = thread * ranksPerThread;

  if (!NCCL_OK(ncclGroupStart(), thread)) return -1;
  for (int k = 0; k < ranksPerThread; ++k)
    if (!NCCL_OK(ncclCommInitRank(&comms[k], nranks, id, firstRank + k), thread)) return -1;
  if (!NCCL_OK(ncclGroupEnd(), thread)) return -1;

  for (int k = 0; k < ranksPerThread; ++k)
    for (size_t i = 0; i < count; ++i) buffers[k][i] = (firstRank + k) * 3 + static_cast<int>(i % 11);

  if (!NCCL_OK(ncclGroupStart(), thread)) return -1;
  for (int k = 0; k < ranksPerThread; ++k)
    if (!NCCL_OK(ncclAllReduce(buffers[k].data(), buffers[k].data(), count, ncclInt32, ncclSum, comms[k], nullptr),
                 thread))
      return -1;
  if (!NCCL_OK(ncclGroupEnd(), thread)) return -1;

  long wrong = 0;
  const int rankPart = 3 * nranks * (nranks - 1) / 2;  // sum over ranks of rank * 3
  for (int k = 0; k < ranksPerThread; ++k)
    for (size_t i = 0; i < count; ++i)
      if (buffers[k][i] != rankPart + nranks * static_cast<int>(i % 11)) ++wrong;

  for (ncclComm_t comm : comms)
    if (!NCCL_OK(ncclCommDestroy(comm), thread)) return -1;
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  const int nThreads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int ranksPerThread = argc > 2 ? std::atoi(argv[2]) : 2;
  const size_t count = argc > 3 ? std::strtoull(argv[3], nullptr, 0) : 1 << 18;
  if (nThreads < 1 || ranksPerThread < 1) {
    std::fprintf(stderr, "usage: %s [threads >= 1] [ranks per thread >= 1] [count]\n", argv[0]);
    return EXIT_FAILURE;
  }
  const int nranks = nThreads * ranksPerThread;

  ncclUniqueId id;
  if (!NCCL_OK(ncclGetUniqueId(&id), -1)) return EXIT_FAILURE;

  std::atomic<long> failures{0};
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < nThreads; ++t)
      threads.emplace_back([&, t] {
        long wrong = driveRanks(t, ranksPerThread, nranks, count, id);
        if (wrong != 0) {
          if (wrong > 0) std::fprintf(stderr, "thread %d: %ld elements wrong\n", t, wrong);
          failures.fetch_add(1);
        }
      });
  }
  if (failures.load() != 0) return EXIT_FAILURE;
  std::printf("multi_rank_per_thread: AllReduce of %zu ints over %d threads x %d ranks: OK\n", count, nThreads,
              ranksPerThread);
  return EXIT_SUCCESS;
}
