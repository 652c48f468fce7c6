#include "transport/net/ib_port_attrs.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace chorus {

namespace {

// Index of the lowest set bit of `value` below `count`, or -1.
int lowestBit(int value, int count) {
  for (int i = 0; i < count; ++i) {
    if (value & (1 << i)) return i;
  }
  return -1;
}

// The preference of chooseRoceGid; 0 never qualifies.
int gidRank(const GidEntry& entry) {
  if (isZeroGid(entry.gid)) return 0;
  switch (entry.type) {
    case GidType::RoceV2:
      if (isIpv4MappedGid(entry.gid)) return 6;
      return isLinkLocalGid(entry.gid) ? 4 : 5;
    case GidType::IbRoceV1:
      return isIpv4MappedGid(entry.gid) ? 3 : 2;
    case GidType::Unknown:
      return 1;
  }
  return 0;
}

}  // namespace

int ibLaneSpeedMbps(int activeSpeed) {
  // SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR, XDR: bit i of active_speed.
  static constexpr int kMbps[] = {2500, 5000, 10000, 10000, 14000, 25000, 50000, 100000, 200000};
  int bit = lowestBit(activeSpeed, static_cast<int>(std::size(kMbps)));
  return bit < 0 ? kMbps[0] : kMbps[bit];
}

int ibWidthLanes(int activeWidth) {
  static constexpr int kLanes[] = {1, 4, 8, 12, 2};  // 1x, 4x, 8x, 12x, 2x
  int bit = lowestBit(activeWidth, static_cast<int>(std::size(kLanes)));
  return bit < 0 ? 1 : kLanes[bit];
}

int ibPortSpeedMbps(int activeSpeed, int activeWidth) {
  return ibLaneSpeedMbps(activeSpeed) * ibWidthLanes(activeWidth);
}

int ibMtuBytes(int mtu) { return mtu >= 1 && mtu <= 5 ? 128 << mtu : 0; }

int minIbMtu(int a, int b) {
  if (ibMtuBytes(a) == 0 || ibMtuBytes(b) == 0) return 0;
  return a < b ? a : b;
}

GidType parseGidType(const std::string& text) {
  std::string trimmed = text.substr(0, text.find_last_not_of(" \t\r\n") + 1);
  if (trimmed == "RoCE v2") return GidType::RoceV2;
  if (trimmed == "IB/RoCE v1") return GidType::IbRoceV1;
  return GidType::Unknown;
}

GidType readGidType(const std::string& device, int port, int index) {
  std::ifstream in("/sys/class/infiniband/" + device + "/ports/" + std::to_string(port) + "/gid_attrs/types/" +
                   std::to_string(index));
  std::string line;
  if (!std::getline(in, line)) return GidType::Unknown;  // unpopulated entries fail to read (EINVAL)
  return parseGidType(line);
}

bool isZeroGid(const GidBytes& gid) {
  for (uint8_t b : gid) {
    if (b != 0) return false;
  }
  return true;
}

bool isIpv4MappedGid(const GidBytes& gid) {
  for (int i = 0; i < 10; ++i) {
    if (gid[i] != 0) return false;
  }
  return gid[10] == 0xff && gid[11] == 0xff;
}

bool isLinkLocalGid(const GidBytes& gid) { return gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80; }

std::string gidToString(const GidBytes& gid) {
  char text[40];
  char* at = text;
  for (int i = 0; i < 16; i += 2) {
    at += snprintf(at, text + sizeof(text) - at, "%s%02x%02x", i == 0 ? "" : ":", gid[i], gid[i + 1]);
  }
  return text;
}

int chooseRoceGid(const std::vector<GidEntry>& entries) {
  int best = -1;
  int bestRank = 0;
  for (const GidEntry& entry : entries) {
    int rank = gidRank(entry);
    if (rank > bestRank || (rank == bestRank && rank > 0 && entry.index < best)) {
      best = entry.index;
      bestRank = rank;
    }
  }
  return best;
}

std::string ibPciPath(const std::string& device) {
  char resolved[PATH_MAX];
  std::string link = "/sys/class/infiniband/" + device + "/device";
  return realpath(link.c_str(), resolved) != nullptr ? resolved : "";
}

}  // namespace chorus
