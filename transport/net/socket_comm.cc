#include "net/socket_comm.h"

#include <algorithm>
#include <utility>

#include "core/debug.h"

namespace chorus {

using namespace socket_net_wire;

SocketComm::SocketComm(bool sending, std::vector<TcpStream> streams)
    : magic_(sending ? kSendMagic : kRecvMagic), control_(std::move(streams.front())) {
  for (size_t i = 1; i < streams.size(); ++i) data_.push_back({std::move(streams[i])});
  for (auto& request : pool_) request.comm = this;
}

ncclResult_t SocketComm::post(char* data, size_t size, NetRequest** request) {
  *request = nullptr;
  if (error_ != ncclSuccess) return error_;
  auto free = std::find_if(pool_.begin(), pool_.end(), [](auto& r) { return r.state == SocketRequest::State::Free; });
  if (free == pool_.end()) return ncclSuccess;  // pool full: the caller retries later
  free->state = SocketRequest::State::Active;
  free->data = data;
  free->capacity = size;
  free->size = sending() ? size : 0;
  order_[tailSeq_++ % order_.size()] = static_cast<uint8_t>(free - pool_.begin());
  *request = reinterpret_cast<NetRequest*>(&*free);
  return ncclSuccess;
}

ncclResult_t SocketComm::test(SocketRequest* request, int* done, int* size) {
  *done = 0;
  if (request->state == SocketRequest::State::Free) {
    WARN("NET/Socket: test(): the request is not posted");
    return ncclInvalidArgument;
  }
  if (request->state == SocketRequest::State::Active) {
    // A request that completed in the same pass as a later failure is still done: the
    // peer's last message before it closed the connection must not be lost.
    const ncclResult_t result = progress();
    if (result != ncclSuccess && request->state != SocketRequest::State::Complete) return result;
  }
  if (request->state == SocketRequest::State::Complete) {
    *done = 1;
    if (size != nullptr) *size = static_cast<int>(request->size);
    request->state = SocketRequest::State::Free;
  }
  return ncclSuccess;
}

// Moves what the kernel allows without waiting; an error sticks to the comm. A pass that
// moved bytes earns one more, for what became ready meanwhile; two keep test() short.
ncclResult_t SocketComm::progress() {
  if (error_ != ncclSuccess) return error_;
  for (int pass = 0; pass < 2; ++pass) {
    bool moved = false;
    ncclResult_t result = progressControl(&moved);
    for (uint32_t i = 0; i < data_.size() && result == ncclSuccess; ++i) result = progressData(i, &moved);
    if (result != ncclSuccess) return error_ = result;
    retire();
    if (!moved) break;
  }
  if (controlClosed_ && headSeq_ == controlSeq_ && controlSeq_ < tailSeq_) {
    // Closed between messages: how a peer that destroyed its communicator looks, so no
    // WARN here; whoever waits for a message from it reports the loss.
    INFO(kSubsysNet, "NET/Socket: connection from %s closed by the peer", control_.peerName().c_str());
    return error_ = ncclRemoteError;
  }
  return ncclSuccess;
}

ncclResult_t SocketComm::progressControl(bool* moved) {
  while (controlSeq_ < tailSeq_ && !controlClosed_) {
    SocketRequest& request = requestAt(controlSeq_);
    char* bytes = reinterpret_cast<char*>(&header_);
    size_t n = 0;
    if (sending()) {
      if (headerDone_ == 0) header_ = {kHeaderMagic, 0, request.size};
      CHORUS_CHECK(control_.sendSome(bytes + headerDone_, sizeof(Header) - headerDone_, &n));
    } else {
      bool closed = false;
      CHORUS_CHECK(control_.recvSome(bytes + headerDone_, sizeof(Header) - headerDone_, &n, &closed));
      if (closed && headerDone_ + n == 0) {
        controlClosed_ = true;  // see progress()
        return ncclSuccess;
      }
      if (closed && headerDone_ + n < sizeof(Header)) return peerClosed(control_, "a message header");
    }
    headerDone_ += n;
    *moved |= n > 0;
    if (headerDone_ < sizeof(Header)) return ncclSuccess;
    if (!sending()) CHORUS_CHECK(acceptHeader(request));
    headerDone_ = 0;
    ++controlSeq_;
  }
  return ncclSuccess;
}

ncclResult_t SocketComm::acceptHeader(SocketRequest& request) {
  if (header_.magic != kHeaderMagic) {
    WARN("NET/Socket: malformed message header from %s (magic %x, expected %x)", peerName().c_str(), header_.magic,
         kHeaderMagic);
    return ncclRemoteError;
  }
  if (header_.size > request.capacity) {
    WARN("NET/Socket: %s sends a message of %llu bytes, larger than the posted receive of %zu bytes",
         peerName().c_str(), static_cast<unsigned long long>(header_.size), request.capacity);
    return ncclRemoteError;
  }
  request.size = header_.size;
  return ncclSuccess;
}

ncclResult_t SocketComm::progressData(uint32_t index, bool* moved) {
  DataStream& stream = data_[index];
  while (stream.seq < controlSeq_) {
    SocketRequest& request = requestAt(stream.seq);
    ChunkRange range = chunkRange(request.size, index, static_cast<uint32_t>(data_.size()));
    size_t length = range.end - range.begin;
    if (stream.done < length) {
      char* at = request.data + range.begin + stream.done;
      size_t n = 0;
      if (sending()) {
        CHORUS_CHECK(stream.stream.sendSome(at, length - stream.done, &n));
      } else {
        bool closed = false;
        CHORUS_CHECK(stream.stream.recvSome(at, length - stream.done, &n, &closed));
        if (closed && stream.done + n < length) return peerClosed(stream.stream, "a message");
      }
      stream.done += n;
      *moved |= n > 0;
      if (stream.done < length) return ncclSuccess;
    }
    ++stream.seq;
    stream.done = 0;
  }
  return ncclSuccess;
}

// The oldest message is complete once every data stream has moved past it.
void SocketComm::retire() {
  while (headSeq_ < controlSeq_) {
    for (const DataStream& stream : data_) {
      if (stream.seq <= headSeq_) return;
    }
    requestAt(headSeq_++).state = SocketRequest::State::Complete;
  }
}

ncclResult_t SocketComm::peerClosed(const TcpStream& stream, const char* what) {
  WARN("NET/Socket: connection from %s closed by the peer in the middle of %s", stream.peerName().c_str(), what);
  return ncclRemoteError;
}

}  // namespace chorus
