#include "transport/net/socket_listener.h"

#include <string>
#include <utility>

#include "core/debug.h"

namespace chorus {

using namespace socket_net_wire;

namespace {

// Sockets that connected but have not said which connection they belong to are dropped
// after this long, so a stray client cannot pin resources on a listener.
constexpr auto kHelloTimeout = std::chrono::seconds(30);
constexpr size_t kMaxArrivals = 256;
constexpr auto kReportInterval = std::chrono::seconds(10);

}  // namespace

SocketListener::~SocketListener() {
  if (drops_ > 0) reportDrops();
}

void SocketListener::dropped(const std::string& why) {
  ++drops_;
  lastDrop_ = why;
  if (lastReport_ == Clock::time_point{} || Clock::now() - lastReport_ >= kReportInterval) reportDrops();
}

void SocketListener::reportDrops() {
  WARN(
      "NET/Socket: %s dropped %zu connection(s) that did not introduce themselves as a rank of this communicator "
      "(latest: %s)",
      address().c_str(), drops_, lastDrop_.c_str());
  drops_ = 0;
  lastReport_ = Clock::now();
}

ncclResult_t SocketListener::progress(std::vector<TcpStream>* complete) {
  while (arrivals_.size() < kMaxArrivals) {
    Arrival arrival;
    bool exhausted = false;
    CHORUS_CHECK(TcpStream::tryAccept(socket_, &arrival.stream, &exhausted));
    if (exhausted) {  // make room: the oldest socket that has not introduced itself goes
      const size_t shed = arrivals_.empty() ? 0 : 1;
      if (shed) arrivals_.erase(arrivals_.begin());
      warnOutOfDescriptors("the socket net listener " + address(), shed);
      break;
    }
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
    dropped("connection " + std::to_string(entry.first) + ": only " + std::to_string(entry.second.filled) + " of its " +
            std::to_string(dataSockets_ + 1) + " sockets arrived within " + std::to_string(kHelloTimeout.count()) +
            " s");
    return true;
  });
  return ncclSuccess;
}

// Reads what there is of the arrival's hello. True when it is finished with: filed into
// its group, or dropped (closed early, malformed, without the key's proof, or too slow).
bool SocketListener::readHello(Arrival& arrival) {
  size_t n = 0;
  bool closed = false;
  if (arrival.stream.recvSome(reinterpret_cast<char*>(&arrival.hello) + arrival.received,
                              sizeof(Hello) - arrival.received, &n, &closed) != ncclSuccess) {
    return true;
  }
  arrival.received += n;
  auto peer = [&arrival] { return arrival.stream.peerName(); };  // only for the drop reports
  if (arrival.received < sizeof(Hello)) {
    if (closed) {
      dropped("from " + peer() + ", closed after " + std::to_string(arrival.received) + " of " +
              std::to_string(sizeof(Hello)) + " hello bytes");
      return true;
    }
    if (Clock::now() - arrival.since < kHelloTimeout) return false;
    dropped("from " + peer() + ", no hello within " + std::to_string(kHelloTimeout.count()) + " s");
    return true;
  }
  const Hello& hello = arrival.hello;
  if (hello.magic != kHelloMagic || hello.dataSockets != dataSockets_ || hello.index > dataSockets_) {
    dropped("from " + peer() + ", a malformed hello (socket " + std::to_string(hello.index) + " of " +
            std::to_string(hello.dataSockets) + ", expected " + std::to_string(dataSockets_) + " data sockets)");
    return true;
  }
  if (hello.proof != helloProof(key_, hello.connectionId, hello.index, hello.dataSockets)) {
    dropped("from " + peer() + ", a hello without proof of the listener's key");
    return true;
  }
  Group& group = groups_[hello.connectionId];
  if (group.streams.empty()) {
    group.streams.resize(dataSockets_ + 1);
    group.since = arrival.since;
  }
  if (group.streams[hello.index].valid()) {
    dropped("from " + peer() + ", socket " + std::to_string(hello.index) + " of connection " +
            std::to_string(hello.connectionId) + " a second time");
    return true;
  }
  group.streams[hello.index] = std::move(arrival.stream);
  ++group.filled;
  return true;
}

}  // namespace chorus
