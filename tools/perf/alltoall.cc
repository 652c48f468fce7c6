// alltoall_perf: block j of rank i's send buffer lands in block i of rank j's receive buffer.
#include "perf_common.h"

using namespace chorus::perf;

int main(int argc, char** argv) {
  return perfMain(
      argc, argv,
      {.name = "AlltoAll",
       .usesOp = false,
       .usesRoot = false,
       .checksInPlace = false,
       .counts =
           [](size_t count, int n) {
             size_t block = count / n;
             return BufferCounts{block * n, block * n, block, 0, 0};
           },
       .algBytesTimesRanks = true,
       .busBwFactor = busBwAllToOne,
       .launch = [](const LaunchArgs& a) { return ncclAlltoAll(a.send, a.recv, a.count, a.type, a.comm, a.stream); },
       .source =
           [](size_t i, int rank, int, int, size_t block) {
             return ElementSource{ElementSource::kCopy, static_cast<int>(i / block), rank * block + i % block};
           }});
}
