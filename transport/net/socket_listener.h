// The receiver's half of connection setup for the socket net: a listening socket that
// accepts whatever arrives, reads each socket's hello and groups the sockets by
// connection, so that accept() can hand out a connection once all of its sockets are in.
// A socket whose hello does not prove the listener's key (socket_net_wire.h), or that says
// nothing in time, is dropped without disturbing the rest; the drops are summed up in one
// WARN per 10 s, not one per socket. Out of descriptors, the oldest socket that has not
// introduced itself yet is closed to make room.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/keyed_hash.h"
#include "core/socket.h"
#include "nccl.h"
#include "transport/net/socket_net_wire.h"
#include "transport/net/tcp_stream.h"

namespace chorus {

// A listening socket and the connections assembling on it, one hello at a time.
class SocketListener {
 public:
  SocketListener(Socket socket, uint32_t dataSockets, const SipKey& key)
      : socket_(std::move(socket)), dataSockets_(dataSockets), key_(key) {}
  ~SocketListener();
  SocketListener(const SocketListener&) = delete;
  SocketListener& operator=(const SocketListener&) = delete;

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
  // Counts a dropped socket; WARNs the count (with the latest `why`) at most every 10 s.
  void dropped(const std::string& why);
  void reportDrops();

  Socket socket_;
  uint32_t dataSockets_;
  SipKey key_;
  size_t drops_ = 0;  // since the last report
  std::string lastDrop_;
  Clock::time_point lastReport_{};
  std::vector<Arrival> arrivals_;
  std::unordered_map<uint64_t, Group> groups_;
};

}  // namespace chorus
