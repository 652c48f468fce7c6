#include "transport/net/socket_listener.h"

#include <utility>

#include "core/debug.h"

namespace chorus {

using namespace socket_net_wire;

namespace {

// Sockets that connected but have not said which connection they belong to are dropped
// after this long, so a stray client cannot pin resources on a listener.
constexpr auto kHelloTimeout = std::chrono::seconds(30);
constexpr size_t kMaxArrivals = 256;

}  // namespace

ncclResult_t SocketListener::progress(std::vector<TcpStream>* complete) {
  while (arrivals_.size() < kMaxArrivals) {
    Arrival arrival;
    CHORUS_CHECK(TcpStream::tryAccept(socket_, &arrival.stream));
    if (!arrival.stream.valid()) break;
    arrival.since = Clock::now();
    arrivals_.push_back(std::move(arrival));
  }
  for (size_t i = 0; i < arrivals_.size();) {
    if (readHello(arrivals_[i])) {
      arrivals_.erase(arrivals_.begin() + i);
    } else {
      ++i;
    }
  }
  for (auto it = groups_.begin(); it != groups_.end(); ++it) {
    if (it->second.filled == dataSockets_ + 1) {
      *complete = std::move(it->second.streams);
      groups_.erase(it);
      return ncclSuccess;
    }
  }
  std::erase_if(groups_, [&](const auto& entry) {
    if (Clock::now() - entry.second.since < kHelloTimeout) return false;
    WARN("NET/Socket: dropping connection %llx on %s: only %u of its %u sockets arrived within %lld s",
         static_cast<unsigned long long>(entry.first), address().c_str(), entry.second.filled, dataSockets_ + 1,
         static_cast<long long>(kHelloTimeout.count()));
    return true;
  });
  return ncclSuccess;
}

// Reads what there is of the arrival's hello. True when it is finished with: filed into
// its group, or dropped (with a WARN: closed early, malformed, or too slow).
bool SocketListener::readHello(Arrival& arrival) {
  size_t n = 0;
  bool closed = false;
  if (arrival.stream.recvSome(reinterpret_cast<char*>(&arrival.hello) + arrival.received,
                              sizeof(Hello) - arrival.received, &n, &closed) != ncclSuccess) {
    return true;
  }
  arrival.received += n;
  auto peer = [&arrival] { return arrival.stream.peerName(); };  // only for WARNs
  if (arrival.received < sizeof(Hello)) {
    if (closed) {
      WARN("NET/Socket: connection from %s on %s closed after %zu of %zu hello bytes; dropping it", peer().c_str(),
           address().c_str(), arrival.received, sizeof(Hello));
      return true;
    }
    if (Clock::now() - arrival.since < kHelloTimeout) return false;
    WARN("NET/Socket: connection from %s on %s sent no hello within %lld s; dropping it", peer().c_str(),
         address().c_str(), static_cast<long long>(kHelloTimeout.count()));
    return true;
  }
  const Hello& hello = arrival.hello;
  if (hello.magic != kHelloMagic || hello.dataSockets != dataSockets_ || hello.index > dataSockets_) {
    WARN(
        "NET/Socket: malformed hello from %s on %s (magic %llx, socket %u of %u, expected %u data sockets); "
        "dropping it",
        peer().c_str(), address().c_str(), static_cast<unsigned long long>(hello.magic), hello.index, hello.dataSockets,
        dataSockets_);
    return true;
  }
  Group& group = groups_[hello.connectionId];
  if (group.streams.empty()) {
    group.streams.resize(dataSockets_ + 1);
    group.since = arrival.since;
  }
  if (group.streams[hello.index].valid()) {
    WARN("NET/Socket: socket %u of connection %llx arrived twice (from %s on %s); dropping the second", hello.index,
         static_cast<unsigned long long>(hello.connectionId), peer().c_str(), address().c_str());
    return true;
  }
  group.streams[hello.index] = std::move(arrival.stream);
  ++group.filled;
  return true;
}

}  // namespace chorus
