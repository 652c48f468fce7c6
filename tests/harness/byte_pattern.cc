#include "harness/byte_pattern.h"

namespace chorus_test {
namespace {

uint64_t mix(uint64_t value) {
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

}  // namespace

uint64_t patternKey(uint64_t call, int sender, int receiver) {
  return mix(call * 1000003ull + static_cast<uint64_t>(sender) * 1009ull + static_cast<uint64_t>(receiver));
}

// One hash per 8 bytes keeps large buffers cheap to fill and check.
unsigned char patternByte(uint64_t key, size_t offset) {
  return static_cast<unsigned char>(mix(key ^ (offset / 8)) >> (8 * (offset % 8)));
}

void fillPattern(void* buffer, size_t bytes, uint64_t key) {
  auto* out = static_cast<unsigned char*>(buffer);
  for (size_t offset = 0; offset < bytes; ++offset) out[offset] = patternByte(key, offset);
}

std::optional<size_t> findPatternMismatch(const void* buffer, size_t bytes, uint64_t key) {
  const auto* in = static_cast<const unsigned char*>(buffer);
  for (size_t offset = 0; offset < bytes; ++offset) {
    if (in[offset] != patternByte(key, offset)) return offset;
  }
  return std::nullopt;
}

}  // namespace chorus_test
