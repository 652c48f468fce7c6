// Host-side knowledge of NCCL's 12 data types, written independently of the
// library: element sizes, value encode/decode (including half, bfloat16 and the
// two fp8 formats) and the limits the tests need to keep results exact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"

namespace chorus_test {

struct DataTypeTraits {
  ncclDataType_t type;
  const char* name;      // "ncclFloat16", as NCCL spells the enum
  size_t size;           // bytes per element
  bool isFloat;          // floating-point format
  bool isSigned;         // can hold negative values
  double exactIntLimit;  // every integer in [-limit, limit] (or [0, limit]) is exact
  double avgTolerance;   // relative tolerance for avg and PreMulSum results
};

// All 12 types, in enum order.
const std::vector<DataTypeTraits>& allDataTypes();
const DataTypeTraits& traitsOf(ncclDataType_t type);

// Minifloat codecs: round to nearest even, subnormals kept, overflow to inf
// (half, bfloat16, e5m2) or NaN (e4m3, which has no infinity).
uint16_t encodeHalf(double value);
double decodeHalf(uint16_t bits);
uint16_t encodeBfloat16(double value);
double decodeBfloat16(uint16_t bits);
uint8_t encodeFp8E4M3(double value);
double decodeFp8E4M3(uint8_t bits);
uint8_t encodeFp8E5M2(double value);
double decodeFp8E5M2(uint8_t bits);

// Stores `value` (rounded into the type) at element `index` of `buffer`.
void storeElement(ncclDataType_t type, void* buffer, size_t index, double value);
// Reads element `index` of `buffer` as a double (exact for every type but 64-bit
// integers beyond 2^53, which the tests never produce).
double loadElement(ncclDataType_t type, const void* buffer, size_t index);

// Formats a double the way a mismatch report should show it (shortest exact-ish).
std::string formatValue(double value);

}  // namespace chorus_test
