// NCCL_IB_HCA: which HCA ports the IB net may use, parsed as NCCL parses it.
//
//   NCCL_IB_HCA=mlx5_0:1,mlx5_1   comma-separated "name[:port]" entries; an entry
//                                  without a port matches every port of the device
//   NCCL_IB_HCA=^mlx5_2            a leading '^' excludes the listed ports instead
//   NCCL_IB_HCA==mlx5_1            a leading '=' matches names exactly (default: prefix,
//                                  so "mlx5" matches mlx5_0, mlx5_1, ...)
//   NCCL_IB_HCA=^=mlx5_1           both
//
// An unset or empty setting, or one whose entries were all malformed, selects every port
// (in both modes: "^" alone excludes nothing). Malformed entries (empty name, a port that
// is not a number in [1, 255]) are dropped with a WARN.
#pragma once

#include <string>
#include <vector>

namespace chorus {

struct HcaFilter {
  struct Entry {
    std::string name;
    int port = -1;  // -1: every port
  };
  bool exclude = false;  // '^': the entries name ports NOT to use
  bool exact = false;    // '=': names must match exactly, not by prefix
  std::vector<Entry> entries;
};

// Parses an NCCL_IB_HCA value; WARNs about and drops malformed entries.
HcaFilter parseHcaFilter(const std::string& text);

// Does port `port` of device `devName` pass the filter?
bool hcaSelected(const HcaFilter& filter, const std::string& devName, int port);

}  // namespace chorus
