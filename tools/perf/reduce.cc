// reduce_perf: the root ends with the reduction of all ranks' buffers; other receive buffers are not checked.
#include "perf_common.h"

using namespace chorus::perf;

int main(int argc, char** argv) {
  return perfMain(argc, argv,
                  {.name = "Reduce",
                   .usesOp = true,
                   .usesRoot = true,
                   .checksInPlace = true,
                   .counts =
                       [](size_t count, int) {
                         return BufferCounts{count, count, count, 0, 0};
                       },
                   .algBytesTimesRanks = false,
                   .busBwFactor = busBwOne,
                   .launch =
                       [](const LaunchArgs& a) {
                         return ncclReduce(a.send, a.recv, a.count, a.type, a.op, a.root, a.comm, a.stream);
                       },
                   .source =
                       [](size_t i, int rank, int, int root, size_t) {
                         return ElementSource{rank == root ? ElementSource::kReduce : ElementSource::kUnchecked, 0, i};
                       }});
}
