// Data types, reduction ops and the input/expected-value patterns of the perf tools.
//
// Inputs are small integers chosen so that every reduction (and every partial
// reduction a ring or tree produces on the way) is exactly representable in the
// element type, as nccl-tests does: the check can then compare bit for bit.
// Only ncclAvg on floating types is compared with a tolerance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"

namespace chorus::perf {

// The ops the tools know, by nccl-tests name. MulSum is ncclRedOpCreatePreMulSum with scalar 2.
enum class PerfOp { Sum, Prod, Max, Min, Avg, MulSum, None };

const char* opName(PerfOp op);                                        // "sum", ..., "mulsum", "none"
bool parseOpList(const std::string& text, std::vector<PerfOp>* ops);  // a name or "all"
ncclRedOp_t builtinRedOp(PerfOp op);                                  // MulSum and None have no built-in op

size_t typeSize(ncclDataType_t type);
const char* typeName(ncclDataType_t type);  // nccl-tests names: "int8" ... "f8e5m2"
bool parseTypeList(const std::string& text, std::vector<ncclDataType_t>* types);
bool isFloatType(ncclDataType_t type);

// Writes integer `value` as one element of `type` (integers wrap as C++ conversions do).
void encodeInteger(ncclDataType_t type, int64_t value, void* out);
// Writes `value` as one element of `type`, rounding to nearest even for floating types.
void encodeReal(ncclDataType_t type, double value, void* out);
// Reads one element of `type` as a double.
double decodeElement(ncclDataType_t type, const void* in);

// What every rank's send buffer holds for one (type, op, nranks) case.
struct InputPattern {
  ncclDataType_t type;
  PerfOp op;  // None for data-movement collectives
  int nranks;
  int64_t modulus;  // values drawn from [0, modulus)
  bool sparse;      // too many ranks for the type's exact range: one rank holds 1, the others 0
};
InputPattern makeInputPattern(ncclDataType_t type, PerfOp op, int nranks);

// Element `index` of rank `rank`'s send buffer.
int64_t inputValue(const InputPattern& pattern, int rank, size_t index);
// Fills `count` elements of `buffer` as rank `rank`'s input.
void fillInput(const InputPattern& pattern, int rank, void* buffer, size_t count);

// The value a reduction over all ranks' element `index` must produce.
struct ExpectedValue {
  int64_t exact;  // when !approximate: compared bit for bit after encodeInteger
  double approx;  // when approximate (Avg of a floating type)
  bool approximate;
};
ExpectedValue reducedValue(const InputPattern& pattern, size_t index);
ExpectedValue copiedValue(const InputPattern& pattern, int rank, size_t index);

// Does element `got` of the pattern's type match `expected`?
bool elementMatches(const InputPattern& pattern, const void* got, const ExpectedValue& expected);

// Scalar used for MulSum, encoded in `type` (1 element).
void mulSumScalar(ncclDataType_t type, void* out);

// A byte pattern that no expected value of any type decodes to (all expected values are >= 0 and small).
constexpr unsigned char kPoisonByte = 0xA5;

}  // namespace chorus::perf
