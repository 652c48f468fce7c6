// broadcast_perf: every rank ends with the root's buffer.
#include "perf_common.h"

using namespace chorus::perf;

int main(int argc, char** argv) {
  return perfMain(
      argc, argv,
      {.name = "Broadcast",
       .usesOp = false,
       .usesRoot = true,
       .checksInPlace = true,
       .counts =
           [](size_t count, int) {
             return BufferCounts{count, count, count, 0, 0};
           },
       .algBytesTimesRanks = false,
       .busBwFactor = busBwOne,
       .launch =
           [](const LaunchArgs& a) { return ncclBroadcast(a.send, a.recv, a.count, a.type, a.root, a.comm, a.stream); },
       .source =
           [](size_t i, int, int, int root, size_t) {
             return ElementSource{ElementSource::kCopy, root, i};
           }});
}
