// SipHash-2-4 (Aumasson and Bernstein): a keyed hash of a few 64-bit words, with which a
// peer proves it knows a secret key without sending it. Words are hashed as their
// little-endian bytes, so the result equals the reference implementation's over those bytes.
#pragma once

#include <cstdint>
#include <span>

namespace chorus {

struct SipKey {
  uint64_t k0 = 0;
  uint64_t k1 = 0;
};

namespace sip_detail {
inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }
inline void round(uint64_t& v0, uint64_t& v1, uint64_t& v2, uint64_t& v3) {
  v0 += v1;
  v1 = rotl(v1, 13);
  v1 ^= v0;
  v0 = rotl(v0, 32);
  v2 += v3;
  v3 = rotl(v3, 16);
  v3 ^= v2;
  v0 += v3;
  v3 = rotl(v3, 21);
  v3 ^= v0;
  v2 += v1;
  v1 = rotl(v1, 17);
  v1 ^= v2;
  v2 = rotl(v2, 32);
}
}  // namespace sip_detail

inline uint64_t sipHash24(const SipKey& key, std::span<const uint64_t> words) {
  using sip_detail::round;
  uint64_t v0 = key.k0 ^ 0x736f6d6570736575ull;
  uint64_t v1 = key.k1 ^ 0x646f72616e646f6dull;
  uint64_t v2 = key.k0 ^ 0x6c7967656e657261ull;
  uint64_t v3 = key.k1 ^ 0x7465646279746573ull;
  for (uint64_t m : words) {
    v3 ^= m;
    round(v0, v1, v2, v3);
    round(v0, v1, v2, v3);
    v0 ^= m;
  }
  const uint64_t last = static_cast<uint64_t>(words.size() * 8 & 0xff) << 56;  // the length byte, no tail
  v3 ^= last;
  round(v0, v1, v2, v3);
  round(v0, v1, v2, v3);
  v0 ^= last;
  v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) round(v0, v1, v2, v3);
  return v0 ^ v1 ^ v2 ^ v3;
}

}  // namespace chorus
