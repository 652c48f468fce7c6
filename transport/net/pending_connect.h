// The sender's half of connection setup for the socket net: one control and N data
// sockets connect in the background and each sends a hello naming the connection, so
// the listener can group sockets that arrive in any order, from any process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/keyed_hash.h"
#include "core/socket.h"
#include "nccl.h"
#include "transport/net/net.h"
#include "transport/net/tcp_stream.h"

namespace chorus {

// The sender's connection while its sockets connect and introduce themselves.
class PendingConnect {
 public:
  // `trafficClass` (0-255, or kNetTrafficClassUndef) goes to every socket's IP_TOS / IPV6_TCLASS.
  // `key`: the listener's, from its handle; each socket's hello proves it (socket_net_wire.h).
  PendingConnect(const SocketAddress& address, uint32_t dataSockets, int trafficClass, const SipKey& key);

  ncclResult_t start();
  // True once every socket is connected and has sent its hello.
  ncclResult_t progress(bool* ready);
  // The streams, control first; call once progress() said ready.
  std::vector<TcpStream> takeStreams();

 private:
  struct ConnectingSocket {
    SocketAddress peer;
    TcpStream stream;
    size_t helloSent = 0;
  };
  std::vector<ConnectingSocket> sockets_;
  uint64_t id_;
  uint32_t dataSockets_;
  int trafficClass_;
  SipKey key_;
};

}  // namespace chorus
