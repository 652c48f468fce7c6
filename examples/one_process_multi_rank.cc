// NCCL documentation, example 1: a single thread drives every rank of one process.
//
// ncclCommInitAll creates all communicators at once; the AllReduce calls of all ranks
// go inside one ncclGroupStart/ncclGroupEnd, so one thread can issue them without
// waiting for each rank in turn. On the CPU executor the buffers are plain host memory
// and a blocking communicator's work is complete when ncclGroupEnd returns (on a GPU
// you would synchronize the streams here).
//
// Its buffers are host memory, for the CPU executor: on a machine with a GPU, where new
// communicators are GPU communicators, run it with CHORUS_EXECUTOR=cpu.
//
//   usage: one_process_multi_rank [nranks=4] [count=1048576]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "nccl.h"

#define NCCL_CHECK(call)                                                                                        \
  do {                                                                                                          \
    ncclResult_t result = (call);                                                                               \
    if (result != ncclSuccess) {                                                                                \
      std::fprintf(stderr, "%s:%d %s failed: %s (%s)\n", __FILE__, __LINE__, #call, ncclGetErrorString(result), \
                   ncclGetLastError(nullptr));                                                                  \
      return EXIT_FAILURE;                                                                                      \
    }                                                                                                           \
  } while (0)

int main(int argc, char** argv) {
  const int nranks = argc > 1 ? std::atoi(argv[1]) : 4;
  const size_t count = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : 1 << 20;
  if (nranks < 1) {
    std::fprintf(stderr, "usage: %s [nranks >= 1] [count]\n", argv[0]);
    return EXIT_FAILURE;
  }

  std::vector<ncclComm_t> comms(nranks);
  NCCL_CHECK(ncclCommInitAll(comms.data(), nranks, nullptr));  // devlist NULL: ranks 0..n-1

  // Small integers: every partial sum is exact in float, so the check can be exact.
  std::vector<std::vector<float>> send(nranks, std::vector<float>(count));
  std::vector<std::vector<float>> recv(nranks, std::vector<float>(count, -1.0f));
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < count; ++i) send[r][i] = static_cast<float>(r + 1 + i % 7);

  NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < nranks; ++r)
    NCCL_CHECK(ncclAllReduce(send[r].data(), recv[r].data(), count, ncclFloat, ncclSum, comms[r], nullptr));
  NCCL_CHECK(ncclGroupEnd());

  size_t wrong = 0;
  const float rankSum = nranks * (nranks + 1) / 2.0f;
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < count; ++i)
      if (recv[r][i] != rankSum + static_cast<float>(nranks * (i % 7))) ++wrong;

  for (ncclComm_t comm : comms) NCCL_CHECK(ncclCommDestroy(comm));

  if (wrong != 0) {
    std::fprintf(stderr, "one_process_multi_rank: %zu of %zu elements wrong\n", wrong, count * nranks);
    return EXIT_FAILURE;
  }
  std::printf("one_process_multi_rank: AllReduce of %zu floats over %d ranks: OK\n", count, nranks);
  return EXIT_SUCCESS;
}
