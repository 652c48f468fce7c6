#include "harness/datatypes.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace chorus_test {
namespace {

// A binary floating-point format with an implicit leading one.
struct MiniFloatFormat {
  int exponentBits;
  int mantissaBits;
  // IEEE formats reserve the all-ones exponent for inf/NaN. e4m3 ("fn") uses it
  // for normal numbers and keeps only all-ones exponent+mantissa as NaN.
  bool ieeeSpecials;

  int bias() const { return (1 << (exponentBits - 1)) - 1; }
  uint32_t exponentMask() const { return (1u << exponentBits) - 1; }
  uint32_t mantissaMask() const { return (1u << mantissaBits) - 1; }
  uint32_t signBit() const { return 1u << (exponentBits + mantissaBits); }
  uint32_t nanBits() const {
    return ieeeSpecials ? (exponentMask() << mantissaBits) | (1u << (mantissaBits - 1))
                        : (exponentMask() << mantissaBits) | mantissaMask();
  }
  uint32_t overflowBits() const { return ieeeSpecials ? exponentMask() << mantissaBits : nanBits(); }
  double maxFinite() const {
    int maxExponent =
        ieeeSpecials ? static_cast<int>(exponentMask()) - 1 - bias() : static_cast<int>(exponentMask()) - bias();
    double maxMantissa = ieeeSpecials ? 2.0 - std::ldexp(1.0, -mantissaBits) : 2.0 - std::ldexp(2.0, -mantissaBits);
    return std::ldexp(maxMantissa, maxExponent);
  }
};

constexpr MiniFloatFormat kHalf{5, 10, true};
constexpr MiniFloatFormat kBfloat16{8, 7, true};
constexpr MiniFloatFormat kE4M3{4, 3, false};
constexpr MiniFloatFormat kE5M2{5, 2, true};

uint32_t encodeMiniFloat(const MiniFloatFormat& format, double value) {
  if (std::isnan(value)) return format.nanBits();
  uint32_t sign = std::signbit(value) ? format.signBit() : 0;
  double magnitude = std::fabs(value);
  if (std::isinf(magnitude)) return sign | format.overflowBits();
  if (magnitude == 0.0) return sign;

  const int minNormalExponent = 1 - format.bias();
  int exponent = std::ilogb(magnitude);
  // Spacing of representable values around `magnitude`: the rounding quantum.
  int quantumExponent = std::max(exponent, minNormalExponent) - format.mantissaBits;
  double rounded = std::nearbyint(std::ldexp(magnitude, -quantumExponent));  // ties to even
  double roundedMagnitude = std::ldexp(rounded, quantumExponent);
  if (roundedMagnitude > format.maxFinite()) return sign | format.overflowBits();
  if (roundedMagnitude == 0.0) return sign;

  int roundedExponent = std::ilogb(roundedMagnitude);
  if (roundedExponent < minNormalExponent) {  // subnormal: exponent field 0
    uint32_t mantissa = static_cast<uint32_t>(std::ldexp(roundedMagnitude, format.mantissaBits - minNormalExponent));
    return sign | mantissa;
  }
  uint32_t exponentField = static_cast<uint32_t>(roundedExponent + format.bias());
  uint32_t mantissa = static_cast<uint32_t>(std::ldexp(roundedMagnitude, format.mantissaBits - roundedExponent)) &
                      format.mantissaMask();
  return sign | (exponentField << format.mantissaBits) | mantissa;
}

double decodeMiniFloat(const MiniFloatFormat& format, uint32_t bits) {
  double sign = (bits & format.signBit()) ? -1.0 : 1.0;
  uint32_t exponentField = (bits >> format.mantissaBits) & format.exponentMask();
  uint32_t mantissa = bits & format.mantissaMask();
  if (format.ieeeSpecials && exponentField == format.exponentMask()) {
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  }
  if (!format.ieeeSpecials && exponentField == format.exponentMask() && mantissa == format.mantissaMask()) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (exponentField == 0)
    return sign * std::ldexp(static_cast<double>(mantissa), 1 - format.bias() - format.mantissaBits);
  double significand = 1.0 + std::ldexp(static_cast<double>(mantissa), -format.mantissaBits);
  return sign * std::ldexp(significand, static_cast<int>(exponentField) - format.bias());
}

// Tolerances for avg and PreMulSum, relative to max(1, sum of |terms|): a few
// units in the last place of each format (fp8 results round at every hop).
const std::vector<DataTypeTraits> kAllTypes = {
    {ncclInt8, "ncclInt8", 1, false, true, 127, 0},
    {ncclUint8, "ncclUint8", 1, false, false, 255, 0},
    {ncclInt32, "ncclInt32", 4, false, true, 2147483647.0, 0},
    {ncclUint32, "ncclUint32", 4, false, false, 4294967295.0, 0},
    {ncclInt64, "ncclInt64", 8, false, true, 9007199254740992.0, 0},
    {ncclUint64, "ncclUint64", 8, false, false, 9007199254740992.0, 0},
    {ncclFloat16, "ncclFloat16", 2, true, true, 2048, 1.0 / 512},
    {ncclFloat32, "ncclFloat32", 4, true, true, 16777216.0, 1e-6},
    {ncclFloat64, "ncclFloat64", 8, true, true, 9007199254740992.0, 1e-12},
    {ncclBfloat16, "ncclBfloat16", 2, true, true, 256, 1.0 / 64},
    {ncclFloat8e4m3, "ncclFloat8e4m3", 1, true, true, 16, 1.0 / 8},
    {ncclFloat8e5m2, "ncclFloat8e5m2", 1, true, true, 8, 1.0 / 4},
};

template <typename T>
void storeAs(void* buffer, size_t index, T value) {
  std::memcpy(static_cast<char*>(buffer) + index * sizeof(T), &value, sizeof(T));
}

template <typename T>
T loadAs(const void* buffer, size_t index) {
  T value;
  std::memcpy(&value, static_cast<const char*>(buffer) + index * sizeof(T), sizeof(T));
  return value;
}

// Decoding every possible bit pattern once makes reading large buffers cheap.
// One table per format (the Format tag keeps the function-local statics apart).
template <const MiniFloatFormat& Format>
const std::vector<double>& decodeTable() {
  static const std::vector<double> table = [] {
    std::vector<double> values(size_t{1} << (1 + Format.exponentBits + Format.mantissaBits));
    for (uint32_t bits = 0; bits < values.size(); ++bits) values[bits] = decodeMiniFloat(Format, bits);
    return values;
  }();
  return table;
}

}  // namespace

const std::vector<DataTypeTraits>& allDataTypes() { return kAllTypes; }

const DataTypeTraits& traitsOf(ncclDataType_t type) {
  int index = static_cast<int>(type);  // kAllTypes is in enum order
  if (index >= 0 && index < static_cast<int>(kAllTypes.size())) return kAllTypes[index];
  throw std::invalid_argument("traitsOf: not an NCCL data type: " + std::to_string(static_cast<int>(type)));
}

uint16_t encodeHalf(double value) { return static_cast<uint16_t>(encodeMiniFloat(kHalf, value)); }
double decodeHalf(uint16_t bits) { return decodeTable<kHalf>()[bits]; }
uint16_t encodeBfloat16(double value) { return static_cast<uint16_t>(encodeMiniFloat(kBfloat16, value)); }
double decodeBfloat16(uint16_t bits) { return decodeTable<kBfloat16>()[bits]; }
uint8_t encodeFp8E4M3(double value) { return static_cast<uint8_t>(encodeMiniFloat(kE4M3, value)); }
double decodeFp8E4M3(uint8_t bits) { return decodeTable<kE4M3>()[bits]; }
uint8_t encodeFp8E5M2(double value) { return static_cast<uint8_t>(encodeMiniFloat(kE5M2, value)); }
double decodeFp8E5M2(uint8_t bits) { return decodeTable<kE5M2>()[bits]; }

void storeElement(ncclDataType_t type, void* buffer, size_t index, double value) {
  switch (type) {
    case ncclInt8:
      return storeAs<int8_t>(buffer, index, static_cast<int8_t>(value));
    case ncclUint8:
      return storeAs<uint8_t>(buffer, index, static_cast<uint8_t>(value));
    case ncclInt32:
      return storeAs<int32_t>(buffer, index, static_cast<int32_t>(value));
    case ncclUint32:
      return storeAs<uint32_t>(buffer, index, static_cast<uint32_t>(value));
    case ncclInt64:
      return storeAs<int64_t>(buffer, index, static_cast<int64_t>(value));
    case ncclUint64:
      return storeAs<uint64_t>(buffer, index, static_cast<uint64_t>(value));
    case ncclFloat16:
      return storeAs<uint16_t>(buffer, index, encodeHalf(value));
    case ncclFloat32:
      return storeAs<float>(buffer, index, static_cast<float>(value));
    case ncclFloat64:
      return storeAs<double>(buffer, index, value);
    case ncclBfloat16:
      return storeAs<uint16_t>(buffer, index, encodeBfloat16(value));
    case ncclFloat8e4m3:
      return storeAs<uint8_t>(buffer, index, encodeFp8E4M3(value));
    case ncclFloat8e5m2:
      return storeAs<uint8_t>(buffer, index, encodeFp8E5M2(value));
    default:
      throw std::invalid_argument("storeElement: bad type");
  }
}

double loadElement(ncclDataType_t type, const void* buffer, size_t index) {
  switch (type) {
    case ncclInt8:
      return loadAs<int8_t>(buffer, index);
    case ncclUint8:
      return loadAs<uint8_t>(buffer, index);
    case ncclInt32:
      return loadAs<int32_t>(buffer, index);
    case ncclUint32:
      return loadAs<uint32_t>(buffer, index);
    case ncclInt64:
      return static_cast<double>(loadAs<int64_t>(buffer, index));
    case ncclUint64:
      return static_cast<double>(loadAs<uint64_t>(buffer, index));
    case ncclFloat16:
      return decodeHalf(loadAs<uint16_t>(buffer, index));
    case ncclFloat32:
      return loadAs<float>(buffer, index);
    case ncclFloat64:
      return loadAs<double>(buffer, index);
    case ncclBfloat16:
      return decodeBfloat16(loadAs<uint16_t>(buffer, index));
    case ncclFloat8e4m3:
      return decodeFp8E4M3(loadAs<uint8_t>(buffer, index));
    case ncclFloat8e5m2:
      return decodeFp8E5M2(loadAs<uint8_t>(buffer, index));
    default:
      throw std::invalid_argument("loadElement: bad type");
  }
}

std::string formatValue(double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

}  // namespace chorus_test
