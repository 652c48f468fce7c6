// nccl-tests' sweep flags, read the same way by tools/perf and by the peer benchmarks
// (bench/peers): -b/-e sizes ("64", "4K", "32M", "1G": powers of 1024, an optional
// trailing B), -i step bytes, -f step factor, -n iterations, -w warmup, -c check.
// Header-only: bench/peers use it without linking Chorus.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <vector>

namespace chorus::perf {

// "32M" -> 33554432. Returns false on junk.
inline bool parseSize(const char* text, size_t* bytes) {
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(text, &end);
  if (errno != 0 || end == text || value < 0) return false;
  double unit = 1;
  switch (*end) {
    case 'G':
    case 'g':
      unit = 1024.0 * 1024 * 1024;
      ++end;
      break;
    case 'M':
    case 'm':
      unit = 1024.0 * 1024;
      ++end;
      break;
    case 'K':
    case 'k':
      unit = 1024.0;
      ++end;
      break;
    default:
      break;
  }
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return false;
  *bytes = static_cast<size_t>(value * unit);
  return true;
}

// A whole decimal, octal (0...) or hex (0x...) number in [minValue, 2^30].
inline bool parseInt(const char* text, int minValue, int* value) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text, &end, 0);
  if (errno != 0 || end == text || *end != '\0' || v < minValue || v > 1 << 30) return false;
  *value = static_cast<int>(v);
  return true;
}

// The sweep, with nccl-tests' defaults.
struct SweepFlags {
  size_t minBytes = 32 << 20;
  size_t maxBytes = 32 << 20;
  size_t stepBytes = 1 << 20;
  double stepFactor = 1;  // > 1: multiply sizes by it; otherwise add stepBytes
  int iters = 20;
  int warmupIters = 1;
  int check = 1;  // 0: no check; otherwise check every element once per size
};

// The sweep flags, for getopt's option string.
inline constexpr const char* kSweepFlagLetters = "b:e:i:f:n:w:c:";

enum class FlagParse { NotASweepFlag, Ok, Bad };

// Reads flag `letter`'s value `text` into `flags` when it is a sweep flag.
inline FlagParse parseSweepFlag(int letter, const char* text, SweepFlags* flags) {
  bool ok = true;
  switch (letter) {
    case 'b':
      ok = parseSize(text, &flags->minBytes);
      break;
    case 'e':
      ok = parseSize(text, &flags->maxBytes);
      break;
    case 'i':
      ok = parseSize(text, &flags->stepBytes) && flags->stepBytes > 0;
      break;
    case 'f': {
      char* end = nullptr;
      flags->stepFactor = std::strtod(text, &end);
      ok = end != text && *end == '\0' && flags->stepFactor >= 1;
      break;
    }
    case 'n':
      ok = parseInt(text, 1, &flags->iters);
      break;
    case 'w':
      ok = parseInt(text, 0, &flags->warmupIters);
      break;
    case 'c':
      ok = parseInt(text, 0, &flags->check);
      break;
    default:
      return FlagParse::NotASweepFlag;
  }
  return ok ? FlagParse::Ok : FlagParse::Bad;
}

// The sizes of the sweep, in bytes: minBytes, then times stepFactor (or plus stepBytes)
// up to maxBytes.
inline std::vector<size_t> sweepSizes(const SweepFlags& flags) {
  std::vector<size_t> sizes;
  for (size_t size = flags.minBytes; size <= flags.maxBytes;) {
    sizes.push_back(size);
    const size_t next = flags.stepFactor > 1 ? static_cast<size_t>(static_cast<double>(size) * flags.stepFactor)
                                             : size + flags.stepBytes;
    if (next <= size) break;  // -b 0 with a factor, or overflow
    size = next;
  }
  return sizes;
}

}  // namespace chorus::perf
