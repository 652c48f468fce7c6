// TCP sockets of this process by traffic class, listening sockets and threads: what tests of
// ncclConfig_t.trafficClass, of the net plugins and of the bootstrap's roots count.
// Header-only and OS-only (no Chorus code), so that the unit tests (which link the static
// library) and the API tests (the shared one) both use it.
#pragma once

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <filesystem>

namespace chorus_test {

// TCP sockets of this process for which `matches(fd)` holds; -1 when /proc/self/fd cannot
// be read.
template <typename Matches>
int tcpSocketsWhere(Matches matches) {
  int found = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (dirent* entry = readdir(dir)) {
    const int fd = atoi(entry->d_name);
    int type = 0;
    socklen_t length = sizeof(type);
    if (fd <= 2 || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) != 0 || type != SOCK_STREAM) continue;
    if (matches(fd)) ++found;
  }
  closedir(dir);
  return found;
}

// TCP sockets of this process whose traffic class (IP_TOS or IPV6_TCLASS) is `trafficClass`;
// -1 when /proc/self/fd cannot be read.
inline int socketsWithTrafficClass(int trafficClass) {
  return tcpSocketsWhere([trafficClass](int fd) {
    int value = -1;
    socklen_t length = sizeof(value);
    if (getsockopt(fd, IPPROTO_IP, IP_TOS, &value, &length) == 0 && value == trafficClass) return true;
    length = sizeof(value);
    return getsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &value, &length) == 0 && value == trafficClass;
  });
}

// Listening TCP sockets of this process; -1 when /proc/self/fd cannot be read.
inline int listeningSockets() {
  return tcpSocketsWhere([](int fd) {
    int value = 0;
    socklen_t length = sizeof(value);
    return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &value, &length) == 0 && value != 0;
  });
}

// Threads of this process (a joined or ended thread leaves a moment after it returns).
inline int threadsOfThisProcess() {
  int count = 0;
  std::error_code error;
  for (auto it = std::filesystem::directory_iterator("/proc/self/task", error);
       !error && it != std::filesystem::directory_iterator(); it.increment(error)) {
    ++count;
  }
  return count;
}

}  // namespace chorus_test
