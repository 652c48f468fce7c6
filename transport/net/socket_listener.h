// The receiver's half of connection setup for the socket net: a listening socket that
// accepts whatever arrives, reads each socket's hello and groups the sockets by
// connection, so that accept() can hand out a connection once all of its sockets are in.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/socket.h"
#include "nccl.h"
#include "transport/net/socket_net_wire.h"
#include "transport/net/tcp_stream.h"

namespace chorus {

// A listening socket and the connections assembling on it, one hello at a time.
class SocketListener {
 public:
  SocketListener(Socket socket, uint32_t dataSockets) : socket_(std::move(socket)), dataSockets_(dataSockets) {}

  // Fills `*complete` (control socket first) when every socket of one connection is in.
  ncclResult_t progress(std::vector<TcpStream>* complete);

  std::string address() const { return socket_.address().toString(); }

 private:
  using Clock = std::chrono::steady_clock;

  // A socket accepted but not yet filed: its hello is still arriving.
  struct Arrival {
    TcpStream stream;
    socket_net_wire::Hello hello{};
    size_t received = 0;
    Clock::time_point since;
  };
  // The sockets of one connection, indexed by their hello's index.
  struct Group {
    std::vector<TcpStream> streams;
    uint32_t filled = 0;
    Clock::time_point since;
  };

  bool readHello(Arrival& arrival);

  Socket socket_;
  uint32_t dataSockets_;
  std::vector<Arrival> arrivals_;
  std::unordered_map<uint64_t, Group> groups_;
};

}  // namespace chorus
