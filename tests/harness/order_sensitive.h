// Values whose float sum depends on the order it is taken in: a few significant bits at
// exponents from 2^-20 to 2^20, so a term small against the running sum vanishes in one
// order and counts in another. Tests of reduction order (deterministic mode, every rank
// getting the same bits) use them, so that another order shows in the result's bits.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace chorus_test {

// A well-mixed 64-bit value for element `i` of tensor `seed` on `rank`.
inline uint64_t mixOf(int rank, size_t i, uint32_t seed) {
  uint64_t h = (static_cast<uint64_t>(seed) << 40) ^ (static_cast<uint64_t>(rank) << 32) ^ i;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 29;
  return h;
}

template <typename T>
T orderSensitiveValue(int rank, size_t i, uint32_t seed) {
  const uint64_t h = mixOf(rank, i, seed);
  const double mantissa = static_cast<double>(static_cast<int>(h % 2001) - 1000) / 7.0;
  return static_cast<T>(std::ldexp(mantissa, static_cast<int>((h >> 16) % 41) - 20));
}

}  // namespace chorus_test
