// Network interface selection for the bootstrap, with NCCL's settings:
//   NCCL_SOCKET_IFNAME  comma-separated interface name prefixes; a leading '^' excludes
//                       them, a leading '=' makes them exact names ("^=eth0" combines both).
//   NCCL_SOCKET_FAMILY  AF_INET or AF_INET6 restricts the address family.
// Default: any interface but docker* and lo; else docker*; else lo. Down interfaces
// are skipped.
#pragma once

#include <string>
#include <vector>

#include "core/socket.h"
#include "nccl.h"

namespace chorus {

struct NetInterface {
  std::string name;
  SocketAddress address;  // port 0
};

// Does `ifname` pass the NCCL_SOCKET_IFNAME-style `list`? An empty list matches everything.
bool matchInterface(const std::string& list, const std::string& ifname);

// NCCL_SOCKET_FAMILY as AF_INET, AF_INET6, or AF_UNSPEC when unset (a bad value WARNs).
int socketFamilySetting();

// Up interfaces whose names pass `list`, one address each (IPv4 first, then global
// IPv6, then link-local IPv6 with its scope id), restricted to `family` unless AF_UNSPEC.
std::vector<NetInterface> listInterfaces(const std::string& list, int family);

// The interface the bootstrap listens on, from NCCL_SOCKET_IFNAME and the defaults,
// restricted to `family` (AF_UNSPEC: NCCL_SOCKET_FAMILY or any).
ncclResult_t findBootstrapInterface(int family, NetInterface* out);

// An up interface whose subnet holds `remote` (honouring NCCL_SOCKET_IFNAME when set),
// so a rank listens where the root it talks to can be reached. False when none.
bool findInterfaceMatchingSubnet(const SocketAddress& remote, NetInterface* out);

// Parses "host:port", "[ipv6]:port" or "ipv6:port" (host may be a name); `family`
// restricts the lookup unless AF_UNSPEC.
ncclResult_t parseHostPort(const std::string& text, int family, SocketAddress* out);

}  // namespace chorus
