#include "transport/net/socket_comm.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/debug.h"

namespace chorus {

using namespace socket_net_wire;

SocketComm::SocketComm(bool sending, std::vector<TcpStream> streams)
    : magic_(sending ? kSendMagic : kRecvMagic), control_(std::move(streams.front())), data_(streams.size() - 1) {
  for (size_t i = 1; i < streams.size(); ++i) data_[i - 1].stream = std::move(streams[i]);
  for (auto& request : pool_) request.comm = this;
}

SocketComm::~SocketComm() {
  // The receiver's notes come back on the control stream: unread at the close, they would
  // make it a reset that drops the last message's bytes still on their way.
  if (sending() && deliverOnClose_ && error_ == ncclSuccess) control_.closeWhenDelivered();
}  // helpers_, declared last, stops and joins first

// NCCL_SOCKET_NTHREADS unset or 1 means no helper threads at all: test() moves the data
// itself, exactly as before helpers existed, so a small machine pays for no idle threads.
// The receiver's socket count wins (it travels in the handle), so a sender asking for
// more threads than the connection has data sockets gets one per socket.
ncclResult_t SocketComm::startHelpers(uint32_t threads) {
  if (threads < 2 || helpers_.count() > 0) return ncclSuccess;
  threads = std::min(threads, static_cast<uint32_t>(data_.size()));
  return helpers_.start(threads,
                        [this](uint32_t helper, std::vector<pollfd>* waitFor) { return helperStep(helper, waitFor); });
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
    const ncclResult_t result = helpers_.count() > 0 ? progressWithHelpers() : progress();
    if (result != ncclSuccess && request->state != SocketRequest::State::Complete) return result;
  }
  if (request->state == SocketRequest::State::Complete) {
    *done = 1;
    if (size != nullptr) *size = static_cast<int>(request->size);
    request->state = SocketRequest::State::Free;
  }
  return ncclSuccess;
}

bool SocketComm::waitSet(std::vector<pollfd>* fds) const {
  if (helpers_.count() > 0) return false;
  const short events = sending() ? POLLOUT : POLLIN;
  const uint64_t control = controlSeq_.load(std::memory_order_relaxed);
  // A header already read ahead would never make the socket readable: test() takes it.
  if (control < tailSeq_ && aheadBegin_ < aheadEnd_) return false;
  if (control < tailSeq_ && !controlClosed_) fds->push_back({control_.fd(), events, 0});
  for (const DataStream& stream : data_)
    if (stream.seq.load(std::memory_order_relaxed) < control) fds->push_back({stream.stream.fd(), events, 0});
  return true;
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
  return error_ = closedBetweenMessages();
}

ncclResult_t SocketComm::closedBetweenMessages() const {
  const uint64_t control = controlSeq_.load(std::memory_order_relaxed);
  if (controlClosed_ && headSeq_ == control && control < tailSeq_) {
    // Closed between messages: how a peer that destroyed its communicator looks, so no
    // WARN here; whoever waits for a message from it reports the loss.
    INFO(kSubsysNet, "NET/Socket: connection from %s closed by the peer", control_.peerName().c_str());
    return ncclRemoteError;
  }
  return ncclSuccess;
}

// The caller's part with helpers: the control stream and completion. The helpers'
// error is read before retire(): the ranges a helper finished before it failed are then
// visible, so a message complete before the failure is still reported done. A failed
// comm stops its helpers before it reports the error: the other helpers could still be
// writing into buffers that the caller may free once it has seen the error.
ncclResult_t SocketComm::progressWithHelpers() {
  if (error_ != ncclSuccess) return error_;
  const uint64_t announced = controlSeq_.load(std::memory_order_relaxed);
  bool moved = false;
  ncclResult_t result = progressControl(&moved);
  if (controlSeq_.load(std::memory_order_relaxed) != announced) helpers_.wake();
  const ncclResult_t helperError = helpers_.error();
  retire();
  // A helper's failure fails its message and those after it. The messages before it
  // still complete on the other helpers' streams: their bytes are in socket buffers.
  const uint64_t failedAt = helperFailedSeq_.load(std::memory_order_relaxed);
  if (result == ncclSuccess && helperError != ncclSuccess && (failedAt == kNotAttributed || headSeq_ >= failedAt)) {
    result = helperError;
  }
  if (result == ncclSuccess) result = closedBetweenMessages();
  if (result != ncclSuccess) helpers_.stop();  // from now on progress() only returns error_
  return error_ = result;
}

// Helper `helper`'s data streams are an even share of them, in order.
ncclResult_t SocketComm::helperStep(uint32_t helper, std::vector<pollfd>* waitFor) {
  const size_t count = data_.size();
  const size_t threads = helpers_.count();
  const short events = sending() ? POLLOUT : POLLIN;
  for (size_t i = count * helper / threads; i < count * (helper + 1) / threads; ++i) {
    bool moved = false;
    DataStream& stream = data_[i];
    if (ncclResult_t result = progressData(static_cast<uint32_t>(i), &moved); result != ncclSuccess) {
      const uint64_t failedAt = stream.seq.load(std::memory_order_relaxed);
      uint64_t lowest = helperFailedSeq_.load(std::memory_order_relaxed);
      while (failedAt < lowest && !helperFailedSeq_.compare_exchange_weak(lowest, failedAt)) {
      }
      return result;
    }
    if (stream.seq.load(std::memory_order_relaxed) < controlSeq_.load(std::memory_order_acquire)) {
      waitFor->push_back({stream.stream.fd(), events, 0});
    }
  }
  return ncclSuccess;
}

ncclResult_t SocketComm::progressControl(bool* moved) {
  while (controlSeq_.load(std::memory_order_relaxed) < tailSeq_ && !controlClosed_) {
    SocketRequest& request = requestAt(controlSeq_.load(std::memory_order_relaxed));
    char* header = reinterpret_cast<char*>(&header_);
    size_t n = 0;
    if (sending()) {
      // A note due here goes before the next header, never inside one.
      if (noteDue()) {
        bool sent = false;
        CHORUS_CHECK(sendQueuedNote(&sent, moved));
        if (!sent) return ncclSuccess;
      }
      if (controlDone_ == 0) header_ = {kHeaderMagic, 0, request.size};
      const size_t payload = travelsInline(request.size) ? request.size : 0;
      const size_t payloadDone = controlDone_ > sizeof(Header) ? controlDone_ - sizeof(Header) : 0;
      const size_t headerDone = controlDone_ - payloadDone;
      CHORUS_CHECK(control_.sendSome(header + headerDone, sizeof(Header) - headerDone, request.data + payloadDone,
                                     payload - payloadDone, &n));
      controlDone_ += n;
      *moved |= n > 0;
      if (controlDone_ < sizeof(Header) + payload) return ncclSuccess;
    } else {
      bool closed = false;
      if (controlDone_ < sizeof(Header)) {
        CHORUS_CHECK(recvControl(header + controlDone_, sizeof(Header) - controlDone_, &n, &closed));
        if (closed && controlDone_ + n == 0) {
          controlClosed_ = true;  // see progress()
          return ncclSuccess;
        }
        if (closed && controlDone_ + n < sizeof(Header)) return peerClosed(control_, "a message header");
        controlDone_ += n;
        *moved |= n > 0;
        if (controlDone_ < sizeof(Header)) return ncclSuccess;
        if (header_.magic != kNoteMagic) CHORUS_CHECK(acceptHeader(request));  // request.size is the message's
      }
      if (header_.magic == kNoteMagic) {  // a note between messages: it takes no request
        bool complete = false;
        CHORUS_CHECK(recvNoteBody(&complete, moved));
        if (!complete) return ncclSuccess;
        controlDone_ = 0;
        continue;
      }
      if (travelsInline(request.size)) {
        const size_t payloadDone = controlDone_ - sizeof(Header);
        CHORUS_CHECK(recvControl(request.data + payloadDone, request.size - payloadDone, &n, &closed));
        controlDone_ += n;
        *moved |= n > 0;
        if (controlDone_ < sizeof(Header) + request.size) {
          return closed ? peerClosed(control_, "a message") : ncclSuccess;
        }
      }
    }
    controlDone_ = 0;
    // Release: a helper that sees the new count sees the request's data and size.
    controlSeq_.store(controlSeq_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  return ncclSuccess;
}

ncclResult_t SocketComm::queueNote(const void* note) {
  if (error_ != ncclSuccess) return error_;
  if (noteOutDone_ > 0) {  // one is under way: this one follows it
    memcpy(noteNext_, note, kNetNoteBytes);
    noteNextPending_ = true;
    return ncclSuccess;
  }
  startNote(note);
  return sendNoteIfDue();
}

void SocketComm::startNote(const void* note) {
  noteOut_.header = {kNoteMagic, 0, kNetNoteBytes};
  memcpy(noteOut_.note, note, kNetNoteBytes);
  noteOutPending_ = true;
  noteOutAfter_ = tailSeq_;
}

// A send comm's note is due once the headers of the messages posted before it are out, and
// not inside another header; a receive comm's whenever one is queued.
bool SocketComm::noteDue() const {
  return noteOutPending_ &&
         (!sending() || (controlDone_ == 0 && controlSeq_.load(std::memory_order_relaxed) >= noteOutAfter_));
}

// Outside progressControl: a send comm with headers still to go sends its note from there, behind them.
ncclResult_t SocketComm::sendNoteIfDue() {
  bool sent = false, moved = false;
  if (noteDue()) {
    if (ncclResult_t r = sendQueuedNote(&sent, &moved); r != ncclSuccess) return error_ = r;
  }
  return ncclSuccess;
}

ncclResult_t SocketComm::sendQueuedNote(bool* sent, bool* moved) {
  *sent = false;
  size_t n = 0;
  const char* frame = reinterpret_cast<const char*>(&noteOut_);
  // The receive comm's notes are best effort: its peer may have closed its end already.
  const ncclResult_t r = control_.sendSome(frame + noteOutDone_, sizeof(NoteFrame) - noteOutDone_, nullptr, 0, &n,
                                           /*warn=*/sending());
  if (r != ncclSuccess && sending()) return r;
  noteOutDone_ += n;
  *moved |= n > 0;
  if (r == ncclSuccess && noteOutDone_ < sizeof(NoteFrame)) return ncclSuccess;
  noteOutDone_ = 0;
  noteOutPending_ = false;
  *sent = true;
  if (noteNextPending_ && r == ncclSuccess) {
    noteNextPending_ = false;
    startNote(noteNext_);
  }
  return ncclSuccess;
}

ncclResult_t SocketComm::recvNoteBody(bool* complete, bool* moved) {
  *complete = false;
  if (header_.size != kNetNoteBytes) {
    WARN("NET/Socket: malformed note from %s (%llu bytes, expected %zu)", peerName().c_str(),
         static_cast<unsigned long long>(header_.size), kNetNoteBytes);
    return ncclRemoteError;
  }
  const size_t done = controlDone_ - sizeof(Header);
  size_t n = 0;
  bool closed = false;
  CHORUS_CHECK(recvControl(reinterpret_cast<char*>(noteIn_.note) + done, kNetNoteBytes - done, &n, &closed));
  controlDone_ += n;
  *moved |= n > 0;
  if (controlDone_ < sizeof(Header) + kNetNoteBytes) return closed ? peerClosed(control_, "a note") : ncclSuccess;
  noteArrived(noteIn_.note);
  *complete = true;
  return ncclSuccess;
}

ncclResult_t SocketComm::recvControl(char* data, size_t size, size_t* received, bool* closed) {
  *closed = false;
  const size_t cached = std::min(size, aheadEnd_ - aheadBegin_);
  memcpy(data, ahead_.data() + aheadBegin_, cached);
  aheadBegin_ += cached;
  *received = cached;
  if (cached == size) return ncclSuccess;
  size_t n = 0;
  if (size - cached >= kReadAheadBytes / 2) {
    CHORUS_CHECK(control_.recvSome(data + cached, size - cached, &n, closed));
    *received += n;
    return ncclSuccess;
  }
  CHORUS_CHECK(control_.recvOnce(ahead_.data(), ahead_.size(), &n, closed));
  const size_t used = std::min(size - cached, n);
  memcpy(data + cached, ahead_.data(), used);
  aheadBegin_ = used;
  aheadEnd_ = n;
  *received += used;
  return ncclSuccess;
}

void SocketComm::noteArrived(const uint8_t* body) {
  memcpy(noteLatest_, body, kNetNoteBytes);
  noteLatestAfter_ = sending() ? 0 : controlSeq_.load(std::memory_order_relaxed);
  noteFresh_ = true;
}

// The receiver's notes are the only bytes that direction carries. Failures here are not
// the data path's: a receiver gone shows on the next send.
void SocketComm::readReverseNotes() {
  while (!noteInClosed_) {
    size_t n = 0;
    bool closed = false;
    char* frame = reinterpret_cast<char*>(&noteIn_);
    if (control_.recvSome(frame + noteInDone_, sizeof(NoteFrame) - noteInDone_, &n, &closed) != ncclSuccess || closed) {
      noteInClosed_ = true;
      return;
    }
    noteInDone_ += n;
    if (noteInDone_ < sizeof(NoteFrame)) return;
    noteInDone_ = 0;
    if (noteIn_.header.magic != kNoteMagic || noteIn_.header.size != kNetNoteBytes) {
      WARN("NET/Socket: malformed note from %s (magic %x, %llu bytes); no more notes are read from it",
           peerName().c_str(), noteIn_.header.magic, static_cast<unsigned long long>(noteIn_.header.size));
      noteInClosed_ = true;
      return;
    }
    noteArrived(noteIn_.note);
  }
}

ncclResult_t SocketComm::takeNote(void* note, uint64_t* after, bool* got) {
  *got = false;
  if (error_ != ncclSuccess) return error_;
  CHORUS_CHECK(sendNoteIfDue());
  if (sending()) readReverseNotes();
  if (!noteFresh_) return ncclSuccess;
  memcpy(note, noteLatest_, kNetNoteBytes);
  *after = noteLatestAfter_;
  noteFresh_ = false;
  *got = true;
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
  // Without helpers all of this is the caller's; with them, only helper `index`'s.
  uint64_t seq = stream.seq.load(std::memory_order_relaxed);
  while (seq < controlSeq_.load(std::memory_order_acquire)) {
    SocketRequest& request = requestAt(seq);
    // An inline message came with its header: nothing of it on the data streams.
    const ChunkRange range = travelsInline(request.size)
                                 ? ChunkRange{0, 0}
                                 : chunkRange(request.size, index, static_cast<uint32_t>(data_.size()));
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
    stream.done = 0;
    // Release: retire() in the caller sees the bytes of this range once it sees the count.
    stream.seq.store(++seq, std::memory_order_release);
  }
  return ncclSuccess;
}

// The oldest message is complete once every data stream has moved past it.
void SocketComm::retire() {
  while (headSeq_ < controlSeq_.load(std::memory_order_relaxed)) {
    for (const DataStream& stream : data_) {
      if (stream.seq.load(std::memory_order_acquire) <= headSeq_) return;
    }
    requestAt(headSeq_++).state = SocketRequest::State::Complete;
  }
}

ncclResult_t SocketComm::peerClosed(const TcpStream& stream, const char* what) {
  WARN("NET/Socket: connection from %s closed by the peer in the middle of %s", stream.peerName().c_str(), what);
  return ncclRemoteError;
}

}  // namespace chorus
