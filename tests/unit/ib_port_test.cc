// Which HCA ports the IB net uses and what it derives from them: NCCL_IB_HCA parsing and
// selection, link speed, path MTU and the choice of a RoCE GID. Pure functions, no HCA.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/debug.h"
#include "transport/net/ib_hca_list.h"
#include "transport/net/ib_port_attrs.h"

namespace chorus {
namespace {

bool lastWarnMentions(const std::string& a, const std::string& b = "") {
  const std::string text = lastErrorText();
  return text.find(a) != std::string::npos && text.find(b) != std::string::npos;
}

// ---- NCCL_IB_HCA ----

TEST(IbHcaList, EmptySettingSelectsEveryPort) {
  HcaFilter filter = parseHcaFilter("");
  EXPECT_TRUE(filter.entries.empty());
  EXPECT_TRUE(hcaSelected(filter, "mlx5_0", 1));
  EXPECT_TRUE(hcaSelected(filter, "anything", 7));
}

TEST(IbHcaList, NamesMatchByPrefixByDefault) {
  HcaFilter filter = parseHcaFilter("mlx5");
  EXPECT_FALSE(filter.exclude);
  EXPECT_FALSE(filter.exact);
  EXPECT_TRUE(hcaSelected(filter, "mlx5_0", 1));
  EXPECT_TRUE(hcaSelected(filter, "mlx5_10", 2));
  EXPECT_FALSE(hcaSelected(filter, "mlx4_0", 1));
  EXPECT_FALSE(hcaSelected(filter, "mlx", 1)) << "a device name shorter than the entry is no match";
}

TEST(IbHcaList, EqualsSignMeansExactNames) {
  HcaFilter filter = parseHcaFilter("=mlx5_1");
  EXPECT_TRUE(filter.exact);
  EXPECT_FALSE(filter.exclude);
  EXPECT_TRUE(hcaSelected(filter, "mlx5_1", 1));
  EXPECT_FALSE(hcaSelected(filter, "mlx5_10", 1));
  EXPECT_FALSE(hcaSelected(filter, "mlx5_", 1));
}

TEST(IbHcaList, CaretExcludesTheListedDevices) {
  HcaFilter filter = parseHcaFilter("^mlx5_0");
  EXPECT_TRUE(filter.exclude);
  EXPECT_FALSE(hcaSelected(filter, "mlx5_0", 1));
  EXPECT_FALSE(hcaSelected(filter, "mlx5_0", 2));
  EXPECT_FALSE(hcaSelected(filter, "mlx5_01", 1)) << "prefix match excludes mlx5_01 too";
  EXPECT_TRUE(hcaSelected(filter, "mlx5_1", 1));
}

TEST(IbHcaList, CaretEqualsExcludesExactNamesOnly) {
  HcaFilter filter = parseHcaFilter("^=mlx5_1");
  EXPECT_TRUE(filter.exclude);
  EXPECT_TRUE(filter.exact);
  EXPECT_FALSE(hcaSelected(filter, "mlx5_1", 1));
  EXPECT_TRUE(hcaSelected(filter, "mlx5_10", 1));
  EXPECT_TRUE(hcaSelected(filter, "mlx5_0", 1));
}

TEST(IbHcaList, PortsRestrictEntriesAndEntriesWithoutPortMatchEveryPort) {
  HcaFilter filter = parseHcaFilter("mlx5_0:1,mlx5_1");
  ASSERT_EQ(filter.entries.size(), 2u);
  EXPECT_EQ(filter.entries[0].name, "mlx5_0");
  EXPECT_EQ(filter.entries[0].port, 1);
  EXPECT_EQ(filter.entries[1].port, -1);
  EXPECT_TRUE(hcaSelected(filter, "mlx5_0", 1));
  EXPECT_FALSE(hcaSelected(filter, "mlx5_0", 2));
  EXPECT_TRUE(hcaSelected(filter, "mlx5_1", 1));
  EXPECT_TRUE(hcaSelected(filter, "mlx5_1", 2));
  EXPECT_FALSE(hcaSelected(filter, "mlx5_2", 1));
}

TEST(IbHcaList, ExcludingOnePortKeepsTheOthers) {
  HcaFilter filter = parseHcaFilter("^mlx5_0:2");
  EXPECT_TRUE(hcaSelected(filter, "mlx5_0", 1));
  EXPECT_FALSE(hcaSelected(filter, "mlx5_0", 2));
  EXPECT_TRUE(hcaSelected(filter, "mlx5_1", 2));
}

TEST(IbHcaList, SameDeviceListedWithTwoPorts) {
  HcaFilter filter = parseHcaFilter("=mlx5_0:1,mlx5_0:2");
  EXPECT_TRUE(hcaSelected(filter, "mlx5_0", 1));
  EXPECT_TRUE(hcaSelected(filter, "mlx5_0", 2));
  EXPECT_FALSE(hcaSelected(filter, "mlx5_0", 3));
}

TEST(IbHcaList, EmptyEntriesAreSkipped) {
  HcaFilter filter = parseHcaFilter("mlx5_0,,mlx5_1,");
  ASSERT_EQ(filter.entries.size(), 2u);
  EXPECT_EQ(filter.entries[0].name, "mlx5_0");
  EXPECT_EQ(filter.entries[1].name, "mlx5_1");
}

TEST(IbHcaList, MalformedPortIsWarnedAboutAndIgnored) {
  clearLastError();
  HcaFilter filter = parseHcaFilter("mlx5_0:x,mlx5_1");
  EXPECT_TRUE(lastWarnMentions("NCCL_IB_HCA", "'mlx5_0:x'")) << lastErrorText();
  ASSERT_EQ(filter.entries.size(), 1u);
  EXPECT_EQ(filter.entries[0].name, "mlx5_1");
  EXPECT_FALSE(hcaSelected(filter, "mlx5_0", 1));
  EXPECT_TRUE(hcaSelected(filter, "mlx5_1", 1));
}

TEST(IbHcaList, EveryKindOfBadPortIsRejected) {
  for (const char* text : {"mlx5_0:", "mlx5_0:0", "mlx5_0:256", "mlx5_0:-1", "mlx5_0:1a", "mlx5_0: 1", "mlx5_0:+1",
                           "mlx5_0:1:2", "mlx5_0:99999999999999999999"}) {
    SCOPED_TRACE(text);
    clearLastError();
    HcaFilter filter = parseHcaFilter(std::string(text) + ",mlx5_3:255");
    EXPECT_TRUE(lastWarnMentions(text)) << lastErrorText();
    ASSERT_EQ(filter.entries.size(), 1u);
    EXPECT_EQ(filter.entries[0].port, 255);
  }
}

TEST(IbHcaList, EntryWithoutNameIsRejected) {
  clearLastError();
  HcaFilter filter = parseHcaFilter(":1,mlx5_0");
  EXPECT_TRUE(lastWarnMentions("no device name")) << lastErrorText();
  ASSERT_EQ(filter.entries.size(), 1u);
  EXPECT_FALSE(hcaSelected(filter, "mlx4_0", 1));
}

TEST(IbHcaList, NothingLeftToMatchSelectsEverything) {
  EXPECT_TRUE(hcaSelected(parseHcaFilter("mlx5_0:x"), "mlx4_0", 1));
  EXPECT_TRUE(hcaSelected(parseHcaFilter("^"), "mlx5_0", 1));
  EXPECT_TRUE(hcaSelected(parseHcaFilter("^="), "mlx5_0", 1));
}

// ---- port facts ----

TEST(IbNetPortAttrs, SpeedIsLaneSpeedTimesWidth) {
  EXPECT_EQ(ibPortSpeedMbps(1, 1), 2500);       // SDR 1x
  EXPECT_EQ(ibPortSpeedMbps(2, 2), 20000);      // DDR 4x
  EXPECT_EQ(ibPortSpeedMbps(4, 2), 40000);      // QDR 4x
  EXPECT_EQ(ibPortSpeedMbps(8, 2), 40000);      // FDR10 4x
  EXPECT_EQ(ibPortSpeedMbps(16, 8), 168000);    // FDR 12x
  EXPECT_EQ(ibPortSpeedMbps(32, 2), 100000);    // EDR 4x
  EXPECT_EQ(ibPortSpeedMbps(64, 2), 200000);    // HDR 4x
  EXPECT_EQ(ibPortSpeedMbps(64, 4), 400000);    // HDR 8x
  EXPECT_EQ(ibPortSpeedMbps(128, 16), 200000);  // NDR 2x
  EXPECT_EQ(ibPortSpeedMbps(128, 2), 400000);   // NDR 4x
  EXPECT_EQ(ibPortSpeedMbps(256, 2), 800000);   // XDR 4x
}

TEST(IbNetPortAttrs, UnknownSpeedOrWidthFallsBackToTheSlowest) {
  EXPECT_EQ(ibLaneSpeedMbps(0), 2500);
  EXPECT_EQ(ibLaneSpeedMbps(1 << 12), 2500);
  EXPECT_EQ(ibWidthLanes(0), 1);
  EXPECT_EQ(ibWidthLanes(64), 1);
  EXPECT_EQ(ibLaneSpeedMbps(32 | 64), 25000) << "the lowest set bit wins";
  EXPECT_GT(ibPortSpeedMbps(0, 0), 0);
}

TEST(IbNetPortAttrs, MtuEnumsAndTheirMinimum) {
  EXPECT_EQ(ibMtuBytes(1), 256);
  EXPECT_EQ(ibMtuBytes(3), 1024);
  EXPECT_EQ(ibMtuBytes(5), 4096);
  EXPECT_EQ(ibMtuBytes(0), 0);
  EXPECT_EQ(ibMtuBytes(6), 0);
  EXPECT_EQ(minIbMtu(5, 3), 3);
  EXPECT_EQ(minIbMtu(3, 5), 3);
  EXPECT_EQ(minIbMtu(4, 4), 4);
  EXPECT_EQ(minIbMtu(1, 5), 1);
  EXPECT_EQ(minIbMtu(0, 3), 0);
  EXPECT_EQ(minIbMtu(3, 7), 0);
  EXPECT_EQ(minIbMtu(-1, 2), 0);
}

TEST(IbNetPortAttrs, GidTypeText) {
  EXPECT_EQ(parseGidType("RoCE v2\n"), GidType::RoceV2);
  EXPECT_EQ(parseGidType("RoCE v2"), GidType::RoceV2);
  EXPECT_EQ(parseGidType("IB/RoCE v1\n"), GidType::IbRoceV1);
  EXPECT_EQ(parseGidType(""), GidType::Unknown);
  EXPECT_EQ(parseGidType("roce v2"), GidType::Unknown);
  EXPECT_EQ(readGidType("chorus_no_such_hca", 1, 0), GidType::Unknown);
  EXPECT_EQ(ibPciPath("chorus_no_such_hca"), "");
}

GidBytes ipv4Gid(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
}
GidBytes linkLocalGid(uint8_t last) { return {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0xff, 0xfe, 0, 0, last}; }
GidBytes globalGid(uint8_t last) { return {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last}; }

TEST(IbNetPortAttrs, GidClassification) {
  EXPECT_TRUE(isZeroGid(GidBytes{}));
  EXPECT_FALSE(isZeroGid(ipv4Gid(10, 0, 0, 1)));
  EXPECT_TRUE(isIpv4MappedGid(ipv4Gid(10, 0, 0, 1)));
  EXPECT_FALSE(isIpv4MappedGid(linkLocalGid(1)));
  EXPECT_FALSE(isIpv4MappedGid(GidBytes{}));
  EXPECT_TRUE(isLinkLocalGid(linkLocalGid(1)));
  EXPECT_FALSE(isLinkLocalGid(globalGid(1)));
  EXPECT_EQ(gidToString(ipv4Gid(10, 0, 0, 1)), "0000:0000:0000:0000:0000:ffff:0a00:0001");
}

TEST(IbNetPortAttrs, RoceGidChoicePrefersV2Ipv4ThenV2Ipv6ThenV1) {
  std::vector<GidEntry> table = {
      {0, linkLocalGid(1), GidType::IbRoceV1},      {1, linkLocalGid(1), GidType::RoceV2},
      {2, ipv4Gid(10, 0, 0, 1), GidType::IbRoceV1}, {3, ipv4Gid(10, 0, 0, 1), GidType::RoceV2},
      {4, globalGid(1), GidType::RoceV2},
  };
  EXPECT_EQ(chooseRoceGid(table), 3);
  table.erase(table.begin() + 3);
  EXPECT_EQ(chooseRoceGid(table), 4) << "RoCE v2 global IPv6 beats link-local and v1";
  table.pop_back();
  EXPECT_EQ(chooseRoceGid(table), 1) << "RoCE v2 link-local beats v1";
  table.erase(table.begin() + 1);
  EXPECT_EQ(chooseRoceGid(table), 2) << "among v1, the IPv4-mapped GID";
  table.erase(table.begin() + 1);
  EXPECT_EQ(chooseRoceGid(table), 0);
}

TEST(IbNetPortAttrs, RoceGidChoiceSkipsZeroEntriesAndBreaksTiesByIndex) {
  EXPECT_EQ(chooseRoceGid({}), -1);
  EXPECT_EQ(chooseRoceGid({{0, GidBytes{}, GidType::RoceV2}, {1, GidBytes{}, GidType::IbRoceV1}}), -1);
  EXPECT_EQ(chooseRoceGid({{7, ipv4Gid(10, 0, 0, 7), GidType::RoceV2}, {5, ipv4Gid(10, 0, 0, 5), GidType::RoceV2}}), 5);
  EXPECT_EQ(chooseRoceGid({{0, GidBytes{}, GidType::RoceV2}, {2, ipv4Gid(1, 2, 3, 4), GidType::Unknown}}), 2)
      << "an entry of unknown type is used when nothing better exists";
  EXPECT_EQ(chooseRoceGid({{2, ipv4Gid(1, 2, 3, 4), GidType::Unknown}, {3, linkLocalGid(3), GidType::IbRoceV1}}), 3);
}

}  // namespace
}  // namespace chorus
