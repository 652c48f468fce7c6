// The foundation's collective matrix: every type x op x count x placement (x root) of
// one collective, as CollectiveCases. Shared by the gtest matrix and the per-process
// tool the network-namespace test runs (tests/system/collective_matrix_rank.cc).
//
// CHORUS_TEST_REDUCED_MATRIX=1 runs 1M+3 only for sum and avg of every type plus every
// op of float32 and int32; CHORUS_TEST_MAX_COUNT=N skips counts above N.
#pragma once

#include <cstddef>
#include <vector>

#include "harness/collective_case.h"

namespace chorus_test {

inline constexpr size_t kLargeCount = (1u << 20) + 3;
inline constexpr size_t kCounts[] = {0, 1, 7, 1023, kLargeCount};

bool runsAtLargeCount(Collective collective, ncclDataType_t type, OpKind op);
std::vector<CollectiveCase> buildCases(Collective collective, int nranks);

}  // namespace chorus_test
