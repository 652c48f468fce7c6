// DynamicRedOp (the GPU's run-time op) must give the same bits as RedOp<T, K> (the op
// fixed at compile time, which reduce_ops_test checks against reference values), for
// every kind, type and pre/post flag.
#include "device/common/dynamic_red_op.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "device/common/datatypes.h"
#include "device/common/reduce_ops.h"

namespace chorus {
namespace {

template <typename T>
std::vector<T> randomValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<T> v(n);
  for (T& x : v) {
    if constexpr (kIsFloatStorage<T>) {
      x = fromFloat<T>(std::uniform_real_distribution<float>(-8, 8)(rng));
    } else if constexpr (std::is_floating_point_v<T>) {
      x = static_cast<T>(std::uniform_real_distribution<double>(-1e3, 1e3)(rng));
    } else {
      uint64_t bits = rng();
      bits = (bits << 32) | rng();
      std::memcpy(&x, &bits, sizeof(T));
    }
  }
  return v;
}

template <typename T>
T scalarFor() {
  if constexpr (kIsFloatStorage<T>) {
    return fromFloat<T>(0.375f);
  } else {
    return static_cast<T>(3);
  }
}

template <typename T, RedKind K>
void expectSameBits() {
  const size_t n = 257;
  const std::vector<T> a = randomValues<T>(n, 1), b = randomValues<T>(n, 2);
  const RedOp<T, K> fixed{scalarFor<T>(), 3};
  const DynamicRedOp<T> dynamic{K, scalarFor<T>(), 3};
  for (int flags = 0; flags < 8; ++flags) {
    const bool preA = flags & 1, preB = flags & 2, post = flags & 4;
    std::vector<T> want(n), got(n);
    reduceArrays(want.data(), a.data(), b.data(), n, fixed, preA, preB, post);
    reduceArrays(got.data(), a.data(), b.data(), n, dynamic, preA, preB, post);
    ASSERT_EQ(std::memcmp(want.data(), got.data(), n * sizeof(T)), 0)
        << "reduce, kind " << static_cast<int>(K) << ", flags " << flags;
    copyArray(want.data(), a.data(), n, fixed, preA, post);
    copyArray(got.data(), a.data(), n, dynamic, preA, post);
    ASSERT_EQ(std::memcmp(want.data(), got.data(), n * sizeof(T)), 0)
        << "copy, kind " << static_cast<int>(K) << ", flags " << flags;
  }
}

template <typename T>
void expectEveryKind() {
  expectSameBits<T, RedKind::Sum>();
  expectSameBits<T, RedKind::Prod>();
  expectSameBits<T, RedKind::Max>();
  expectSameBits<T, RedKind::Min>();
  expectSameBits<T, RedKind::PreMulSum>();
  if constexpr (std::is_integral_v<T>) expectSameBits<T, RedKind::SumPostDiv>();
}

TEST(DynamicRedOpTest, SameBitsAsTheCompileTimeOp) {
  expectEveryKind<int8_t>();
  expectEveryKind<uint8_t>();
  expectEveryKind<int32_t>();
  expectEveryKind<uint64_t>();
  expectEveryKind<int64_t>();
  expectEveryKind<float>();
  expectEveryKind<double>();
  expectEveryKind<Half>();
  expectEveryKind<BFloat16>();
  expectEveryKind<Fp8E4M3>();
  expectEveryKind<Fp8E5M2>();
}

}  // namespace
}  // namespace chorus
