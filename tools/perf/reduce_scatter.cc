// reduce_scatter_perf: rank r ends with block r of the reduction of all ranks' buffers.
#include "perf_common.h"

using namespace chorus::perf;

int main(int argc, char** argv) {
  return perfMain(argc, argv,
                  {.name = "ReduceScatter",
                   .usesOp = true,
                   .usesRoot = false,
                   .checksInPlace = true,
                   .counts =
                       [](size_t count, int n) {
                         size_t block = count / n;
                         return BufferCounts{block * n, block, block, 0, block};
                       },
                   .algBytesTimesRanks = true,
                   .busBwFactor = busBwAllToOne,
                   .launch =
                       [](const LaunchArgs& a) {
                         return ncclReduceScatter(a.send, a.recv, a.count, a.type, a.op, a.comm, a.stream);
                       },
                   .source =
                       [](size_t i, int rank, int, int, size_t block) {
                         return ElementSource{ElementSource::kReduce, 0, rank * block + i};
                       }});
}
