#include "transport/net/pending_connect.h"

#include <atomic>
#include <random>
#include <utility>

#include "core/debug.h"
#include "transport/net/socket_net_wire.h"

namespace chorus {

using namespace socket_net_wire;

namespace {

// Distinguishes the connections arriving at one listener, across processes.
uint64_t newConnectionId() {
  static const uint64_t base = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  static std::atomic<uint64_t> counter{0};
  return base + counter.fetch_add(1) * 0x9e3779b97f4a7c15ull;
}

}  // namespace

PendingConnect::PendingConnect(const SocketAddress& address, uint32_t dataSockets, int trafficClass, const SipKey& key)
    : sockets_(dataSockets + 1),
      id_(newConnectionId()),
      dataSockets_(dataSockets),
      trafficClass_(trafficClass),
      key_(key) {
  for (auto& socket : sockets_) socket.peer = address;
}

ncclResult_t PendingConnect::start() {
  for (auto& socket : sockets_) {
    CHORUS_CHECK(TcpStream::startConnect(socket.peer, &socket.stream));
    if (trafficClass_ != kNetTrafficClassUndef) CHORUS_CHECK(socket.stream.setTrafficClass(trafficClass_));
  }
  return ncclSuccess;
}

ncclResult_t PendingConnect::progress(bool* ready) {
  *ready = true;
  for (uint32_t i = 0; i < sockets_.size(); ++i) {
    ConnectingSocket& socket = sockets_[i];
    bool connected = false;
    CHORUS_CHECK(socket.stream.pollConnected(&connected));
    if (connected && socket.helloSent < sizeof(Hello)) {
      const Hello hello = makeHello(key_, id_, i, dataSockets_);
      size_t sent = 0;
      CHORUS_CHECK(socket.stream.sendSome(reinterpret_cast<const char*>(&hello) + socket.helloSent,
                                          sizeof(Hello) - socket.helloSent, &sent));
      socket.helloSent += sent;
    }
    if (socket.helloSent < sizeof(Hello)) *ready = false;
  }
  return ncclSuccess;
}

std::vector<TcpStream> PendingConnect::takeStreams() {
  std::vector<TcpStream> streams;
  for (auto& socket : sockets_) streams.push_back(std::move(socket.stream));
  return streams;
}

}  // namespace chorus
