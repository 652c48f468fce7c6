// One rank of the collective matrix in its own process, for tests that start the ranks
// themselves (tests/system/netns_two_hosts.sh puts each in its own network namespace).
// The unique id comes from NCCL_COMM_ID, so the ranks need no other channel.
//
//   usage: collective_matrix_rank <rank> <nranks>      exit 0 when every case matched
#include <cstdio>
#include <cstdlib>

#include "harness/collective_case.h"
#include "harness/collective_matrix.h"
#include "harness/failure_log.h"
#include "nccl.h"

int main(int argc, char** argv) {
  using namespace chorus_test;
  if (argc != 3 || std::getenv("NCCL_COMM_ID") == nullptr) {
    std::fprintf(stderr, "usage: NCCL_COMM_ID=<ip:port> %s <rank> <nranks>\n", argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const int nranks = std::atoi(argv[2]);
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r == ncclSuccess) r = ncclCommInitRank(&comm, nranks, id, rank);
  if (r != ncclSuccess) {
    std::fprintf(stderr, "rank %d: init failed: %s (%s)\n", rank, ncclGetErrorString(r), ncclGetLastError(nullptr));
    return 1;
  }
  CollectiveRankRunner runner(rank, nranks);
  FailureLog log;
  size_t cases = 0;
  for (Collective collective : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather,
                                Collective::kBroadcast, Collective::kReduce}) {
    for (const CollectiveCase& testCase : buildCases(collective, nranks)) {
      runner.run(testCase, comm, log);
      ++cases;
    }
  }
  r = ncclCommDestroy(comm);
  const RankOutcome outcome = log.outcome();
  std::printf("rank %d: %zu cases, %s%s\n", rank, cases, outcome.ok ? "all matched" : "FAILED:\n",
              outcome.message.c_str());
  return outcome.ok && r == ncclSuccess ? 0 : 1;
}
