// scatter_perf: rank r ends with block r of the root's send buffer.
#include "perf_common.h"

using namespace chorus::perf;

int main(int argc, char** argv) {
  return perfMain(
      argc, argv,
      {.name = "Scatter",
       .usesOp = false,
       .usesRoot = true,
       .checksInPlace = true,
       .counts =
           [](size_t count, int n) {
             size_t block = count / n;
             return BufferCounts{block * n, block, block, 0, block};
           },
       .algBytesTimesRanks = true,
       .busBwFactor = busBwAllToOne,
       .launch =
           [](const LaunchArgs& a) { return ncclScatter(a.send, a.recv, a.count, a.type, a.root, a.comm, a.stream); },
       .source =
           [](size_t i, int rank, int, int root, size_t block) {
             return ElementSource{ElementSource::kCopy, root, rank * block + i};
           }});
}
