// core/keyed_hash.h against SipHash-2-4's reference vectors (key 00 01 .. 0f, message
// 00 01 .. n-1), and a changed key or word changes the hash.
#include "core/keyed_hash.h"

#include <gtest/gtest.h>

#include <vector>

namespace chorus {
namespace {

TEST(KeyedHash, ReferenceVectors) {
  const SipKey key{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  EXPECT_EQ(sipHash24(key, {}), 0x726fdb47dd0e0e31ull);
  const std::vector<uint64_t> eight = {0x0706050403020100ull};
  EXPECT_EQ(sipHash24(key, eight), 0x93f5f5799a932462ull);
  const std::vector<uint64_t> sixteen = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  EXPECT_EQ(sipHash24(key, sixteen), 0x3f2acc7f57c29bdbull);
  EXPECT_NE(sipHash24(SipKey{key.k0 ^ 1, key.k1}, sixteen), 0x3f2acc7f57c29bdbull);
  const std::vector<uint64_t> other = {0x0706050403020100ull, 0x0f0e0d0c0b0a0909ull};
  EXPECT_NE(sipHash24(key, other), 0x3f2acc7f57c29bdbull);
}

}  // namespace
}  // namespace chorus
