#include "perf_data.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace chorus::perf {
namespace {

struct TypeInfo {
  ncclDataType_t type;
  const char* name;
  size_t size;
  bool isFloat;
  int64_t maxExactInteger;  // every integer in [0, this] is exactly representable
};

// uint8 stops at 127 like int8 so the poison byte 0xA5 can never be an expected value.
constexpr TypeInfo kTypes[] = {
    {ncclInt8, "int8", 1, false, 127},         {ncclUint8, "uint8", 1, false, 127},
    {ncclInt32, "int32", 4, false, 1 << 20},   {ncclUint32, "uint32", 4, false, 1 << 20},
    {ncclInt64, "int64", 8, false, 1 << 20},   {ncclUint64, "uint64", 8, false, 1 << 20},
    {ncclFloat16, "half", 2, true, 2048},      {ncclFloat32, "float", 4, true, 1 << 20},
    {ncclFloat64, "double", 8, true, 1 << 20}, {ncclBfloat16, "bfloat16", 2, true, 256},
    {ncclFloat8e4m3, "f8e4m3", 1, true, 16},   {ncclFloat8e5m2, "f8e5m2", 1, true, 8},
};

const TypeInfo& info(ncclDataType_t type) {
  for (const TypeInfo& t : kTypes)
    if (t.type == type) return t;
  return kTypes[7];  // unreachable for types that came from parseTypeList
}

constexpr struct {
  PerfOp op;
  const char* name;
} kOps[] = {{PerfOp::Sum, "sum"}, {PerfOp::Prod, "prod"}, {PerfOp::Max, "max"},
            {PerfOp::Min, "min"}, {PerfOp::Avg, "avg"},   {PerfOp::MulSum, "mulsum"}};

// A small IEEE-style float format: sign, expBits, mantBits, bias. E4M3 has no infinities
// and only S.1111.111 as NaN; the others reserve the all-ones exponent.
struct MiniFloat {
  int expBits;
  int mantBits;
  bool ieeeSpecials;
  int bias() const { return (1 << (expBits - 1)) - 1; }
};
constexpr MiniFloat kHalf{5, 10, true}, kBf16{8, 7, true}, kE4M3{4, 3, false}, kE5M2{5, 2, true};

// Round to nearest even, saturating to the largest finite value (enough for the
// integers and powers of two the patterns produce).
uint32_t encodeMini(const MiniFloat& f, double x) {
  uint32_t sign = std::signbit(x) ? 1u : 0u;
  x = std::fabs(x);
  const int maxBiased = f.ieeeSpecials ? (1 << f.expBits) - 2 : (1 << f.expBits) - 1;
  const uint32_t maxMant = f.ieeeSpecials ? (1u << f.mantBits) - 1 : (1u << f.mantBits) - 2;
  uint32_t biased = 0, mant = 0;
  if (x != 0.0) {
    int e;
    double frac = std::frexp(x, &e);  // x = frac * 2^e, frac in [0.5, 1)
    int exponent = e - 1 + f.bias();
    if (exponent <= 0) {  // subnormal
      mant = static_cast<uint32_t>(std::nearbyint(std::ldexp(x, f.bias() - 1 + f.mantBits)));
      if (mant >> f.mantBits) biased = 1, mant = 0;
    } else {
      mant = static_cast<uint32_t>(std::nearbyint((frac * 2 - 1) * (1 << f.mantBits)));
      if (mant >> f.mantBits) ++exponent, mant = 0;
      biased = static_cast<uint32_t>(exponent);
    }
    if (biased > static_cast<uint32_t>(maxBiased) || (biased == static_cast<uint32_t>(maxBiased) && mant > maxMant))
      biased = maxBiased, mant = maxMant;
  }
  return (sign << (f.expBits + f.mantBits)) | (biased << f.mantBits) | mant;
}

double decodeMini(const MiniFloat& f, uint32_t bits) {
  const uint32_t mantMask = (1u << f.mantBits) - 1, expMask = (1u << f.expBits) - 1;
  uint32_t mant = bits & mantMask, biased = (bits >> f.mantBits) & expMask;
  bool negative = (bits >> (f.expBits + f.mantBits)) & 1;
  double value;
  if (biased == expMask && (f.ieeeSpecials || mant == mantMask)) {
    value = (f.ieeeSpecials && mant == 0) ? HUGE_VAL : NAN;
  } else if (biased == 0) {
    value = std::ldexp(static_cast<double>(mant), 1 - f.bias() - f.mantBits);
  } else {
    value = std::ldexp(1.0 + std::ldexp(static_cast<double>(mant), -f.mantBits), static_cast<int>(biased) - f.bias());
  }
  return negative ? -value : value;
}

}  // namespace

void encodeReal(ncclDataType_t type, double value, void* out) {
  switch (type) {
    case ncclFloat16: {
      uint16_t b = static_cast<uint16_t>(encodeMini(kHalf, value));
      std::memcpy(out, &b, 2);
      break;
    }
    case ncclBfloat16: {
      uint16_t b = static_cast<uint16_t>(encodeMini(kBf16, value));
      std::memcpy(out, &b, 2);
      break;
    }
    case ncclFloat8e4m3:
      *static_cast<uint8_t*>(out) = static_cast<uint8_t>(encodeMini(kE4M3, value));
      break;
    case ncclFloat8e5m2:
      *static_cast<uint8_t*>(out) = static_cast<uint8_t>(encodeMini(kE5M2, value));
      break;
    case ncclFloat32: {
      float f = static_cast<float>(value);
      std::memcpy(out, &f, 4);
      break;
    }
    case ncclFloat64:
      std::memcpy(out, &value, 8);
      break;
    default:
      encodeInteger(type, static_cast<int64_t>(value), out);
      break;
  }
}

namespace {

// splitmix64: inputs that look random, so misplaced blocks or elements are caught.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

const char* opName(PerfOp op) {
  for (const auto& o : kOps)
    if (o.op == op) return o.name;
  return "none";
}

bool parseOpList(const std::string& text, std::vector<PerfOp>* ops) {
  ops->clear();
  if (text == "all") {
    for (const auto& o : kOps) ops->push_back(o.op);
    return true;
  }
  for (const auto& o : kOps)
    if (text == o.name) ops->push_back(o.op);
  return !ops->empty();
}

ncclRedOp_t builtinRedOp(PerfOp op) {
  switch (op) {
    case PerfOp::Prod:
      return ncclProd;
    case PerfOp::Max:
      return ncclMax;
    case PerfOp::Min:
      return ncclMin;
    case PerfOp::Avg:
      return ncclAvg;
    default:
      return ncclSum;
  }
}

size_t typeSize(ncclDataType_t type) { return info(type).size; }
const char* typeName(ncclDataType_t type) { return info(type).name; }
bool isFloatType(ncclDataType_t type) { return info(type).isFloat; }

bool parseTypeList(const std::string& text, std::vector<ncclDataType_t>* types) {
  // nccl-tests' names plus NCCL's own spellings for a few types.
  static constexpr struct {
    const char* alias;
    ncclDataType_t type;
  } kAliases[] = {{"char", ncclInt8},
                  {"int", ncclInt32},
                  {"float16", ncclFloat16},
                  {"float32", ncclFloat32},
                  {"float64", ncclFloat64},
                  {"bf16", ncclBfloat16},
                  {"float8e4m3", ncclFloat8e4m3},
                  {"float8e5m2", ncclFloat8e5m2},
                  {"fp8e4m3", ncclFloat8e4m3},
                  {"fp8e5m2", ncclFloat8e5m2}};
  types->clear();
  if (text == "all") {
    for (const TypeInfo& t : kTypes) types->push_back(t.type);
    return true;
  }
  for (const TypeInfo& t : kTypes)
    if (text == t.name) types->push_back(t.type);
  for (const auto& a : kAliases)
    if (text == a.alias) types->push_back(a.type);
  return !types->empty();
}

void encodeInteger(ncclDataType_t type, int64_t value, void* out) {
  switch (type) {
    case ncclInt8:
      *static_cast<int8_t*>(out) = static_cast<int8_t>(value);
      break;
    case ncclUint8:
      *static_cast<uint8_t*>(out) = static_cast<uint8_t>(value);
      break;
    case ncclInt32: {
      int32_t v = static_cast<int32_t>(value);
      std::memcpy(out, &v, 4);
      break;
    }
    case ncclUint32: {
      uint32_t v = static_cast<uint32_t>(value);
      std::memcpy(out, &v, 4);
      break;
    }
    case ncclInt64:
    case ncclUint64:
      std::memcpy(out, &value, 8);
      break;
    default:
      encodeReal(type, static_cast<double>(value), out);
      break;
  }
}

double decodeElement(ncclDataType_t type, const void* in) {
  switch (type) {
    case ncclInt8:
      return *static_cast<const int8_t*>(in);
    case ncclUint8:
      return *static_cast<const uint8_t*>(in);
    case ncclFloat8e4m3:
      return decodeMini(kE4M3, *static_cast<const uint8_t*>(in));
    case ncclFloat8e5m2:
      return decodeMini(kE5M2, *static_cast<const uint8_t*>(in));
    default:
      break;
  }
  unsigned char bytes[8];
  std::memcpy(bytes, in, typeSize(type));
  switch (type) {
    case ncclInt32: {
      int32_t v;
      std::memcpy(&v, bytes, 4);
      return v;
    }
    case ncclUint32: {
      uint32_t v;
      std::memcpy(&v, bytes, 4);
      return v;
    }
    case ncclInt64: {
      int64_t v;
      std::memcpy(&v, bytes, 8);
      return static_cast<double>(v);
    }
    case ncclUint64: {
      uint64_t v;
      std::memcpy(&v, bytes, 8);
      return static_cast<double>(v);
    }
    case ncclFloat16: {
      uint16_t v;
      std::memcpy(&v, bytes, 2);
      return decodeMini(kHalf, v);
    }
    case ncclBfloat16: {
      uint16_t v;
      std::memcpy(&v, bytes, 2);
      return decodeMini(kBf16, v);
    }
    case ncclFloat32: {
      float v;
      std::memcpy(&v, bytes, 4);
      return v;
    }
    default: {
      double v;
      std::memcpy(&v, bytes, 8);
      return v;
    }
  }
}

InputPattern makeInputPattern(ncclDataType_t type, PerfOp op, int nranks) {
  InputPattern p{type, op, nranks, 2, false};
  const int64_t maxExact = info(type).maxExactInteger;
  switch (op) {
    case PerfOp::None:
      p.modulus = std::min<int64_t>(maxExact + 1, 1 << 16);
      break;
    case PerfOp::Prod:
      p.modulus = 2;
      break;  // see inputValue
    default: {
      // Each rank contributes at most modulus-1 (times 2 for MulSum): the full sum stays exact.
      int64_t perRank = maxExact / nranks / (op == PerfOp::MulSum ? 2 : 1);
      p.sparse = perRank < 1;
      p.modulus = std::clamp<int64_t>(perRank + 1, 2, 1024);
    }
  }
  return p;
}

int64_t inputValue(const InputPattern& p, int rank, size_t index) {
  uint64_t r = mix((static_cast<uint64_t>(rank) + 1) * 0x100000001b3ull ^ index);
  if (p.op == PerfOp::Prod) {
    // Factors of 1 and 2 from at most 8 ranks: products up to 256, exact in every float type.
    return (rank < 8 && r % 3 == 0) ? 2 : 1;
  }
  if (p.sparse) return (index % p.nranks) == static_cast<size_t>(rank) ? 1 : 0;
  return static_cast<int64_t>(r % static_cast<uint64_t>(p.modulus));
}

void fillInput(const InputPattern& p, int rank, void* buffer, size_t count) {
  const size_t size = typeSize(p.type);
  auto* bytes = static_cast<unsigned char*>(buffer);
  for (size_t i = 0; i < count; ++i) encodeInteger(p.type, inputValue(p, rank, i), bytes + i * size);
}

ExpectedValue reducedValue(const InputPattern& p, size_t index) {
  int64_t acc = inputValue(p, 0, index);
  if (p.op == PerfOp::MulSum) acc *= 2;
  for (int r = 1; r < p.nranks; ++r) {
    int64_t v = inputValue(p, r, index);
    switch (p.op) {
      case PerfOp::Prod:
        acc *= v;
        break;
      case PerfOp::Max:
        acc = std::max(acc, v);
        break;
      case PerfOp::Min:
        acc = std::min(acc, v);
        break;
      case PerfOp::MulSum:
        acc += 2 * v;
        break;
      default:
        acc += v;
        break;  // Sum, Avg
    }
  }
  if (p.op == PerfOp::Avg) {
    if (isFloatType(p.type)) return {0, static_cast<double>(acc) / p.nranks, true};
    acc /= p.nranks;  // NCCL divides the integer sum, truncating
  }
  return {acc, 0.0, false};
}

ExpectedValue copiedValue(const InputPattern& p, int rank, size_t index) {
  return {inputValue(p, rank, index), 0.0, false};
}

bool elementMatches(const InputPattern& p, const void* got, const ExpectedValue& expected) {
  const size_t size = typeSize(p.type);
  if (!expected.approximate) {
    unsigned char want[8];
    encodeInteger(p.type, expected.exact, want);
    return std::memcmp(want, got, size) == 0;
  }
  // Avg on floats: NCCL pre-multiplies by 1/n in the element type, so allow a few ulps per rank.
  double epsilon;
  switch (p.type) {
    case ncclFloat16:
      epsilon = std::ldexp(1.0, -10);
      break;
    case ncclBfloat16:
      epsilon = std::ldexp(1.0, -7);
      break;
    case ncclFloat8e4m3:
      epsilon = std::ldexp(1.0, -3);
      break;
    case ncclFloat8e5m2:
      epsilon = std::ldexp(1.0, -2);
      break;
    case ncclFloat32:
      epsilon = std::ldexp(1.0, -23);
      break;
    default:
      epsilon = std::ldexp(1.0, -52);
      break;
  }
  double value = decodeElement(p.type, got);
  double tolerance = 2.0 * (p.nranks + 1) * epsilon * std::max(1.0, std::fabs(expected.approx));
  return std::fabs(value - expected.approx) <= tolerance;
}

void mulSumScalar(ncclDataType_t type, void* out) { encodeInteger(type, 2, out); }

}  // namespace chorus::perf
