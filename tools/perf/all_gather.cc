// all_gather_perf: every rank ends with all ranks' blocks, in rank order.
#include "perf_common.h"

using namespace chorus::perf;

int main(int argc, char** argv) {
  return perfMain(
      argc, argv,
      {.name = "AllGather",
       .usesOp = false,
       .usesRoot = false,
       .checksInPlace = true,
       .counts =
           [](size_t count, int n) {
             size_t block = count / n;
             return BufferCounts{block, block * n, block, block, 0};
           },
       .algBytesTimesRanks = true,
       .busBwFactor = busBwAllToOne,
       .launch = [](const LaunchArgs& a) { return ncclAllGather(a.send, a.recv, a.count, a.type, a.comm, a.stream); },
       .source =
           [](size_t i, int, int, int, size_t block) {
             return ElementSource{ElementSource::kCopy, static_cast<int>(i / block), i % block};
           }});
}
