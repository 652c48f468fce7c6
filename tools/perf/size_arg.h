// Size arguments as nccl-tests reads them ("64", "4K", "32M", "1G": powers of 1024, an
// optional trailing B). Header-only: bench/peers use it without linking Chorus.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdlib>

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

}  // namespace chorus::perf
