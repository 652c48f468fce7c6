// Facts about an HCA port that the IB net derives from verbs values and sysfs: link
// speed, path MTU, GID types and the GID a RoCE connection should use. Kept free of
// <infiniband/verbs.h> (values are the verbs enums as ints) so that they are testable,
// and compiled, everywhere.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus {

// ibv_port_attr::active_speed (one bit per generation) -> Mbps per lane. Unknown values
// count as the slowest (SDR, 2500), so a new generation is underestimated, never 0.
int ibLaneSpeedMbps(int activeSpeed);
// ibv_port_attr::active_width (1: 1x, 2: 4x, 4: 8x, 8: 12x, 16: 2x) -> lanes; unknown: 1.
int ibWidthLanes(int activeWidth);
// The port's speed in Mbps, as ncclNetProperties::speed.
int ibPortSpeedMbps(int activeSpeed, int activeWidth);

// enum ibv_mtu (1: 256 ... 5: 4096) -> bytes; 0 when not a valid value.
int ibMtuBytes(int mtu);
// The path MTU two ports can use: the smaller enum value, or 0 when either is invalid.
int minIbMtu(int a, int b);

// gid_attrs/types/<index> in sysfs: "IB/RoCE v1", "RoCE v2", or unreadable (Unknown).
enum class GidType { Unknown, IbRoceV1, RoceV2 };
GidType parseGidType(const std::string& text);
GidType readGidType(const std::string& device, int port, int index);

using GidBytes = std::array<uint8_t, 16>;

struct GidEntry {
  int index = 0;
  GidBytes gid{};
  GidType type = GidType::Unknown;
};

bool isZeroGid(const GidBytes& gid);
bool isIpv4MappedGid(const GidBytes& gid);  // ::ffff:a.b.c.d
bool isLinkLocalGid(const GidBytes& gid);   // fe80::/10
std::string gidToString(const GidBytes& gid);

// The GID a RoCE connection should use when NCCL_IB_GID_INDEX is unset: RoCE v2 with an
// IPv4-mapped address (routable, what RoCE fabrics are configured for), then RoCE v2
// with a global IPv6 address, then RoCE v2 link-local, then RoCE v1 (IPv4-mapped
// first), then entries of unknown type. Zero (unpopulated) entries never qualify; ties
// go to the lowest index. Returns the chosen entry's index, or -1 when none qualifies.
int chooseRoceGid(const std::vector<GidEntry>& entries);

// realpath of /sys/class/infiniband/<device>/device, or "" when there is none.
std::string ibPciPath(const std::string& device);

}  // namespace chorus
