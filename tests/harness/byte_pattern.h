// Deterministic byte patterns for data-movement checks (send/recv, alltoall,
// gather, scatter): every byte depends on a key (who sent it to whom, which
// call) and its offset, so misplaced, stale or truncated data is caught.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace chorus_test {

uint64_t patternKey(uint64_t call, int sender, int receiver);
void fillPattern(void* buffer, size_t bytes, uint64_t key);
// Offset of the first byte that differs from the pattern, if any.
std::optional<size_t> findPatternMismatch(const void* buffer, size_t bytes, uint64_t key);
unsigned char patternByte(uint64_t key, size_t offset);

}  // namespace chorus_test
