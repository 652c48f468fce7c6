// all_reduce_perf: every rank ends with the reduction of all ranks' buffers.
#include "perf_common.h"

using namespace chorus::perf;

int main(int argc, char** argv) {
  return perfMain(
      argc, argv,
      {.name = "AllReduce",
       .usesOp = true,
       .usesRoot = false,
       .checksInPlace = true,
       .counts =
           [](size_t count, int) {
             return BufferCounts{count, count, count, 0, 0};
           },
       .algBytesTimesRanks = false,
       .busBwFactor = busBwAllReduce,
       .launch =
           [](const LaunchArgs& a) { return ncclAllReduce(a.send, a.recv, a.count, a.type, a.op, a.comm, a.stream); },
       .source =
           [](size_t i, int, int, int, size_t) {
             return ElementSource{ElementSource::kReduce, 0, i};
           }});
}
