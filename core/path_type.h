// How far apart two devices of one host are, best first, as NCCL names the levels: the
// same GPU, NVLink, one PCI switch, several PCI switches, through a CPU, across the CPU
// sockets' link. The topology (src/topo) measures paths in these terms and the transports
// compare them with NCCL_P2P_LEVEL.
#pragma once

#include <strings.h>

#include <cstdlib>
#include <string>

namespace chorus {

enum class PathType { LOC = 0, NVL = 1, PIX = 2, PXB = 3, PHB = 4, SYS = 5 };

inline const char* pathTypeName(PathType type) {
  constexpr const char* kNames[] = {"LOC", "NVL", "PIX", "PXB", "PHB", "SYS"};
  const int i = static_cast<int>(type);
  return i >= 0 && i <= static_cast<int>(PathType::SYS) ? kNames[i] : "?";
}

// Reads a level as NCCL_P2P_LEVEL and NCCL_NET_GDR_LEVEL take it: a name (LOC, NVL, PIX,
// PXB, PHB, SYS; NCCL's NVB counts as NVL) or a number of the older form (0 LOC, 1 PIX,
// 2 PXB, 3 PHB, 4 and up SYS). False for anything else.
inline bool parsePathLevel(const std::string& text, PathType* level) {
  for (int i = 0; i <= static_cast<int>(PathType::SYS); ++i) {
    if (strcasecmp(text.c_str(), pathTypeName(static_cast<PathType>(i))) == 0) {
      *level = static_cast<PathType>(i);
      return true;
    }
  }
  if (strcasecmp(text.c_str(), "NVB") == 0) {
    *level = PathType::NVL;
    return true;
  }
  char* end = nullptr;
  const long number = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || number < 0) return false;
  constexpr PathType kLegacy[] = {PathType::LOC, PathType::PIX, PathType::PXB, PathType::PHB};
  *level = number < 4 ? kLegacy[number] : PathType::SYS;
  return true;
}

}  // namespace chorus
