#include "core/interfaces.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string_view>

#include "core/debug.h"
#include "core/env.h"

namespace chorus {

bool matchInterface(const std::string& list, const std::string& ifname) {
  std::string_view rest(list);
  bool exclude = false;
  bool exact = false;
  if (!rest.empty() && rest.front() == '^') {
    exclude = true;
    rest.remove_prefix(1);
  }
  if (!rest.empty() && rest.front() == '=') {
    exact = true;
    rest.remove_prefix(1);
  }
  bool anyEntry = false;
  bool listed = false;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view entry = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (entry.empty()) continue;
    anyEntry = true;
    if (exact ? ifname == entry : std::string_view(ifname).substr(0, entry.size()) == entry) listed = true;
  }
  // An empty list restricts nothing and excludes nothing.
  if (!anyEntry) return true;
  return exclude ? !listed : listed;
}

int socketFamilySetting() {
  std::string family = envString("NCCL_SOCKET_FAMILY");
  if (family.empty()) return AF_UNSPEC;
  if (family == "AF_INET") return AF_INET;
  if (family == "AF_INET6") return AF_INET6;
  WARN("NCCL_SOCKET_FAMILY=%s is neither AF_INET nor AF_INET6; ignoring it", family.c_str());
  return AF_UNSPEC;
}

namespace {

using IfaddrsPtr = std::unique_ptr<ifaddrs, decltype(&freeifaddrs)>;

IfaddrsPtr readInterfaces() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    WARN("Bootstrap: getifaddrs() failed: %s", strerror(errno));
    list = nullptr;
  }
  return IfaddrsPtr(list, &freeifaddrs);
}

bool isLinkLocal6(const sockaddr_in6* sin6) { return IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr); }

// Lower ranks are preferred: IPv4, then global IPv6, then link-local IPv6.
int addressPreference(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) return 0;
  return isLinkLocal6(reinterpret_cast<const sockaddr_in6*>(sa)) ? 2 : 1;
}

bool usableAddress(const ifaddrs* ifa, int family) {
  if (ifa->ifa_addr == nullptr || (ifa->ifa_flags & IFF_UP) == 0) return false;
  int f = ifa->ifa_addr->sa_family;
  if (f != AF_INET && f != AF_INET6) return false;
  return family == AF_UNSPEC || f == family;
}

SocketAddress interfaceAddress(const ifaddrs* ifa) {
  SocketAddress address;
  address.assign(ifa->ifa_addr, ifa->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
  if (address.family() == AF_INET6) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&address.storage);
    // A link-local address means nothing without the interface it belongs to.
    if (isLinkLocal6(sin6) && sin6->sin6_scope_id == 0) sin6->sin6_scope_id = if_nametoindex(ifa->ifa_name);
    sin6->sin6_flowinfo = 0;
  }
  address.setPort(0);
  return address;
}

bool sameSubnet(const sockaddr* local, const sockaddr* mask, const SocketAddress& remote) {
  if (local->sa_family != remote.family() || mask == nullptr) return false;
  const uint8_t* a;
  const uint8_t* b;
  const uint8_t* m;
  size_t bytes;
  if (remote.family() == AF_INET) {
    a = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(local)->sin_addr);
    b = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(&remote.storage)->sin_addr);
    m = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(mask)->sin_addr);
    bytes = 4;
  } else {
    const auto* l6 = reinterpret_cast<const sockaddr_in6*>(local);
    const auto* r6 = reinterpret_cast<const sockaddr_in6*>(&remote.storage);
    a = l6->sin6_addr.s6_addr;
    b = r6->sin6_addr.s6_addr;
    m = reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr.s6_addr;
    bytes = 16;
  }
  for (size_t i = 0; i < bytes; ++i) {
    if ((a[i] & m[i]) != (b[i] & m[i])) return false;
  }
  return true;
}

}  // namespace

std::vector<NetInterface> listInterfaces(const std::string& list, int family) {
  std::vector<NetInterface> found;
  std::vector<int> preference;
  IfaddrsPtr all = readInterfaces();
  for (const ifaddrs* ifa = all.get(); ifa != nullptr; ifa = ifa->ifa_next) {
    if (!usableAddress(ifa, family) || !matchInterface(list, ifa->ifa_name)) continue;
    int pref = addressPreference(ifa->ifa_addr);
    auto it = std::find_if(found.begin(), found.end(), [&](const NetInterface& i) { return i.name == ifa->ifa_name; });
    if (it == found.end()) {
      found.push_back({ifa->ifa_name, interfaceAddress(ifa)});
      preference.push_back(pref);
    } else if (pref < preference[it - found.begin()]) {
      it->address = interfaceAddress(ifa);
      preference[it - found.begin()] = pref;
    }
  }
  return found;
}

ncclResult_t findBootstrapInterface(int family, NetInterface* out) {
  if (family == AF_UNSPEC) family = socketFamilySetting();
  const char* familyName = family == AF_INET ? " (AF_INET)" : family == AF_INET6 ? " (AF_INET6)" : "";
  if (auto list = envValue("NCCL_SOCKET_IFNAME"); list && !list->empty()) {
    auto found = listInterfaces(*list, family);
    if (found.empty()) {
      WARN("Bootstrap: no up interface%s matches NCCL_SOCKET_IFNAME=%s", familyName, list->c_str());
      return ncclSystemError;
    }
    *out = found.front();
    return ncclSuccess;
  }
  // NCCL's default order: real interfaces, then docker bridges, then loopback.
  for (const char* list : {"^docker,lo", "docker", "lo"}) {
    auto found = listInterfaces(list, family);
    if (!found.empty()) {
      *out = found.front();
      return ncclSuccess;
    }
  }
  WARN("Bootstrap: no up network interface%s found (not even loopback)", familyName);
  return ncclSystemError;
}

bool findInterfaceMatchingSubnet(const SocketAddress& remote, NetInterface* out) {
  std::string list = envString("NCCL_SOCKET_IFNAME");
  IfaddrsPtr all = readInterfaces();
  for (const ifaddrs* ifa = all.get(); ifa != nullptr; ifa = ifa->ifa_next) {
    if (!usableAddress(ifa, remote.family()) || !matchInterface(list, ifa->ifa_name)) continue;
    if (sameSubnet(ifa->ifa_addr, ifa->ifa_netmask, remote)) {
      *out = {ifa->ifa_name, interfaceAddress(ifa)};
      return true;
    }
  }
  return false;
}

ncclResult_t parseHostPort(const std::string& text, int family, SocketAddress* out) {
  std::string host;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      WARN("Bootstrap: cannot parse \"%s\": expected [ipv6]:port", text.c_str());
      return ncclInvalidArgument;
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    // "host:port", or an unbracketed IPv6 literal whose last ':' starts the port.
    size_t colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      WARN("Bootstrap: cannot parse \"%s\": expected host:port", text.c_str());
      return ncclInvalidArgument;
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  char* end = nullptr;
  long portNumber = port.empty() ? -1 : strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || portNumber < 1 || portNumber > 65535) {
    WARN("Bootstrap: bad port \"%s\" in \"%s\"", port.c_str(), text.c_str());
    return ncclInvalidArgument;
  }
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* result = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &result);
  if (rc != 0 || result == nullptr) {
    WARN("Bootstrap: cannot resolve \"%s\": getaddrinfo: %s", host.c_str(), gai_strerror(rc));
    return ncclInvalidArgument;
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(result, &freeaddrinfo);
  for (const addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    if (out->assign(ai->ai_addr, ai->ai_addrlen)) return ncclSuccess;
  }
  WARN("Bootstrap: \"%s\" resolves to no IPv4 or IPv6 address", host.c_str());
  return ncclInvalidArgument;
}

}  // namespace chorus
