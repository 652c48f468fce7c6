#include "harness/collective_matrix.h"

#include <cstdint>
#include <cstdlib>
#include <string>

#include "harness/datatypes.h"

namespace chorus_test {

namespace {

bool reducedMatrixRequested() {
  const char* value = std::getenv("CHORUS_TEST_REDUCED_MATRIX");
  return value != nullptr && std::string(value) == "1";
}

size_t maxCountRequested() {
  const char* value = std::getenv("CHORUS_TEST_MAX_COUNT");
  return value != nullptr ? std::strtoull(value, nullptr, 10) : SIZE_MAX;
}

}  // namespace

bool runsAtLargeCount(Collective collective, ncclDataType_t type, OpKind op) {
  if (!isReducing(collective) || !reducedMatrixRequested()) return true;
  return op == OpKind::kSum || op == OpKind::kAvg || type == ncclFloat32 || type == ncclInt32;
}

std::vector<CollectiveCase> buildCases(Collective collective, int nranks) {
  std::vector<CollectiveCase> cases;
  uint64_t seed = 1;
  const std::vector<OpKind> dataMovementOps = {OpKind::kSum};
  const std::vector<OpKind>& ops = isReducing(collective) ? allOpKinds() : dataMovementOps;
  std::vector<int> roots = {0};
  if (hasRoot(collective) && nranks > 1) roots.push_back(nranks - 1);
  for (size_t count : kCounts) {
    if (count > maxCountRequested()) continue;
    for (const DataTypeTraits& traits : allDataTypes()) {
      for (OpKind op : ops) {
        if (count == kLargeCount && !runsAtLargeCount(collective, traits.type, op)) continue;
        size_t apiCount = count;
        if (count == kLargeCount &&
            (collective == Collective::kAllGather || collective == Collective::kReduceScatter)) {
          apiCount = (kLargeCount / nranks) | 1;
        }
        for (bool inPlace : {false, true}) {
          for (int root : roots) {
            cases.push_back(CollectiveCase{collective, traits.type, op, apiCount, inPlace, root, seed++});
          }
        }
      }
    }
  }
  return cases;
}

}  // namespace chorus_test
