// gather_perf: the root ends with all ranks' blocks in rank order; other receive buffers are not checked.
#include "perf_common.h"

using namespace chorus::perf;

int main(int argc, char** argv) {
  return perfMain(
      argc, argv,
      {.name = "Gather",
       .usesOp = false,
       .usesRoot = true,
       .checksInPlace = true,
       .counts =
           [](size_t count, int n) {
             size_t block = count / n;
             return BufferCounts{block, block * n, block, block, 0};
           },
       .algBytesTimesRanks = true,
       .busBwFactor = busBwAllToOne,
       .launch =
           [](const LaunchArgs& a) { return ncclGather(a.send, a.recv, a.count, a.type, a.root, a.comm, a.stream); },
       .source =
           [](size_t i, int rank, int, int root, size_t block) {
             if (rank != root) return ElementSource{ElementSource::kUnchecked, 0, 0};
             return ElementSource{ElementSource::kCopy, static_cast<int>(i / block), i % block};
           }});
}
