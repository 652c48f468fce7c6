// sendrecv_perf: each rank sends its buffer to rank+1 and receives from rank-1 (a ring shift).
#include "perf_common.h"

using namespace chorus::perf;

int main(int argc, char** argv) {
  return perfMain(argc, argv,
                  {.name = "SendRecv",
                   .usesOp = false,
                   .usesRoot = false,
                   .checksInPlace = false,
                   .counts =
                       [](size_t count, int) {
                         return BufferCounts{count, count, count, 0, 0};
                       },
                   .algBytesTimesRanks = false,
                   .busBwFactor = busBwOne,
                   .launch =
                       [](const LaunchArgs& a) {
                         ncclResult_t result = ncclGroupStart();
                         if (result == ncclSuccess)
                           result = ncclSend(a.send, a.count, a.type, (a.rank + 1) % a.nranks, a.comm, a.stream);
                         if (result == ncclSuccess)
                           result =
                               ncclRecv(a.recv, a.count, a.type, (a.rank + a.nranks - 1) % a.nranks, a.comm, a.stream);
                         ncclResult_t end = ncclGroupEnd();  // always close the group we opened
                         return result != ncclSuccess ? result : end;
                       },
                   .source =
                       [](size_t i, int rank, int n, int, size_t) {
                         return ElementSource{ElementSource::kCopy, (rank + n - 1) % n, i};
                       }});
}
