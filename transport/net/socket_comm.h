// One side of a socket net connection: the per-connection data path. A message is a
// header on the control stream, then the payload: right behind the header if it is small
// (socket_net_wire::travelsInline), else cut into one range per data stream
// (socket_net_wire::chunkRange). test() runs a non-blocking state machine over the
// streams. With helper threads (NCCL_SOCKET_NTHREADS >= 2, see startHelpers) test()
// keeps only the control stream and completion; the helpers move the data ranges.
#pragma once

#include <poll.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"
#include "transport/net/net.h"
#include "transport/net/socket_helpers.h"
#include "transport/net/socket_net.h"  // SocketNet::kMaxRequests, the pool size it promises callers
#include "transport/net/socket_net_wire.h"
#include "transport/net/tcp_stream.h"

namespace chorus {

class SocketComm;

// What isend/irecv hand out as a NetRequest: a slot of its comm's pool.
struct SocketRequest {
  enum class State : uint8_t { Free, Active, Complete };
  SocketComm* comm = nullptr;
  State state = State::Free;
  char* data = nullptr;
  size_t capacity = 0;  // receive: the posted size
  size_t size = 0;      // send: the message; receive: from the header
};

// One side of a connection: the control stream, the data streams and the request pool.
// Requests move through three cursors: headers (control) go first, then each data
// stream carries its range of each message in order, then the oldest retires.
class SocketComm {
 public:
  // `streams`: the control stream first, then the data streams in order.
  SocketComm(bool sending, std::vector<TcpStream> streams);
  ~SocketComm();  // stops and joins the helpers before the streams close
  SocketComm(const SocketComm&) = delete;
  SocketComm& operator=(const SocketComm&) = delete;

  // Hands the data streams to `threads` helper threads (clamped to the data streams);
  // 0 or 1 keeps today's single-threaded data path. Call once, before the first post().
  ncclResult_t startHelpers(uint32_t threads);
  uint32_t helperThreads() const { return helpers_.count(); }

  // A send comm of a failed connection: its close does not wait for delivery (~SocketComm).
  void abandon() { deliverOnClose_ = false; }

  bool sending() const { return magic_ == kSendMagic; }
  // The magic tells a send comm from a receive comm behind an opaque pointer.
  bool isKind(bool sending) const { return magic_ == (sending ? kSendMagic : kRecvMagic); }
  std::string peerName() const { return control_.peerName(); }
  size_t dataSockets() const { return data_.size(); }

  // Takes a free request for `size` bytes at `data`; `*request` is null when the pool is full.
  ncclResult_t post(char* data, size_t size, NetRequest** request);
  // Progresses the comm; once `request` is complete sets `*done`, `*size` and frees it.
  ncclResult_t test(SocketRequest* request, int* done, int* size);
  // What the posted requests wait for, as poll() entries (Net::waitSet): the control
  // stream while a header is due, each data stream while its range of an announced
  // message is due. False with helper threads: no socket of the caller's shows their progress.
  bool waitSet(std::vector<pollfd>* fds) const;

  // Net::sendNote and Net::takeNote. A send comm's note goes on the control stream behind
  // the headers of the messages posted before it; a receive comm's goes back on the control
  // socket, best effort (a peer that closed its end gets none, without a WARN). A receive
  // comm reads notes while it reads headers, a send comm in takeNote.
  ncclResult_t queueNote(const void* note);
  ncclResult_t takeNote(void* note, uint64_t* after, bool* got);

 private:
  static constexpr uint32_t kSendMagic = 0x534e4453u;
  static constexpr uint32_t kRecvMagic = 0x534e4452u;

  // Who owns what. Without helpers, everything is the calling thread's. With helpers,
  // helper t of T alone touches data streams [t*n/T, (t+1)*n/T) (`stream`, `done`,
  // the bytes of their ranges); it publishes `seq` with a release store once a range is done,
  // and the caller's retire() reads it with an acquire load. Everything else (pool,
  // cursors, header, control stream) stays the caller's; helpers only read controlSeq_
  // (acquire) and, for the messages below it, the data and size of their requests, which
  // the caller wrote before it released controlSeq_ and rewrites only after retire().
  struct DataStream {
    TcpStream stream;
    std::atomic<uint64_t> seq = 0;  // the message this stream is on
    size_t done = 0;                // bytes of its range moved
  };

  SocketRequest& requestAt(uint64_t seq) { return pool_[order_[seq % order_.size()]]; }

  ncclResult_t progress();
  ncclResult_t progressWithHelpers();
  ncclResult_t closedBetweenMessages() const;
  ncclResult_t helperStep(uint32_t helper, std::vector<pollfd>* waitFor);
  ncclResult_t progressControl(bool* moved);
  ncclResult_t acceptHeader(SocketRequest& request);
  ncclResult_t progressData(uint32_t index, bool* moved);
  void retire();
  ncclResult_t peerClosed(const TcpStream& stream, const char* what);
  // Makes `note` the one to send next, behind the messages posted so far.
  void startNote(const void* note);
  bool noteDue() const;
  ncclResult_t sendNoteIfDue();
  // Moves the queued note; `*sent` once all of it is out (or, from a receive comm, dropped).
  ncclResult_t sendQueuedNote(bool* sent, bool* moved);
  // A receive comm, with a note's header in header_: reads its body; `*complete` once in.
  ncclResult_t recvNoteBody(bool* complete, bool* moved);
  void noteArrived(const uint8_t* body);
  void readReverseNotes();  // a send comm: whatever notes its receiver sent back
  // A receive comm's reads of its control stream: from the read-ahead first; when that is
  // empty, a small remainder comes with whatever else has arrived in one recv() (the rest of
  // a small message, the next header), a large one straight into `data`.
  ncclResult_t recvControl(char* data, size_t size, size_t* received, bool* closed);

  uint32_t magic_;
  ncclResult_t error_ = ncclSuccess;
  bool deliverOnClose_ = true;
  TcpStream control_;
  std::vector<DataStream> data_;
  std::array<SocketRequest, SocketNet::kMaxRequests> pool_;
  std::array<uint8_t, SocketNet::kMaxRequests> order_{};  // pool indices by sequence number
  uint64_t headSeq_ = 0;                                  // oldest message not yet complete
  std::atomic<uint64_t> controlSeq_ = 0;                  // next header to send or receive
  uint64_t tailSeq_ = 0;                                  // next message to post
  socket_net_wire::Header header_{};
  // Bytes of the control stream a receive comm has read but not yet used (recvControl): a
  // small message's header and payload then cost one recv() instead of two.
  static constexpr size_t kReadAheadBytes = 8192;
  std::array<char, kReadAheadBytes> ahead_{};
  size_t aheadBegin_ = 0;
  size_t aheadEnd_ = 0;
  size_t controlDone_ = 0;  // bytes of the current header, and of its inline payload, moved
  // The peer closed the control socket between two messages: the data of the messages
  // already announced may still be on the data sockets, so the comm fails only once
  // those are in and a posted receive waits for a header that cannot come.
  bool controlClosed_ = false;
  // The lowest message a helper failed on; kNotAttributed for a failure outside any
  // message (poll()), which fails the comm at once. Written before the helper's error.
  static constexpr uint64_t kNotAttributed = UINT64_MAX;
  std::atomic<uint64_t> helperFailedSeq_ = kNotAttributed;
  // Notes. Out: the note being sent (noteOutDone_ bytes of its frame gone), the one queued
  // behind it while it is under way, and the message count it follows. In: the frame being
  // read, and the newest note not yet taken.
  socket_net_wire::NoteFrame noteOut_{};
  size_t noteOutDone_ = 0;
  bool noteOutPending_ = false;
  uint64_t noteOutAfter_ = 0;
  uint8_t noteNext_[kNetNoteBytes] = {};
  bool noteNextPending_ = false;
  socket_net_wire::NoteFrame noteIn_{};
  size_t noteInDone_ = 0;
  bool noteInClosed_ = false;  // a send comm whose receiver closed: nothing more to read
  uint8_t noteLatest_[kNetNoteBytes] = {};
  uint64_t noteLatestAfter_ = 0;
  bool noteFresh_ = false;
  SocketHelpers helpers_;  // last: joined before anything it reads is destroyed
};

}  // namespace chorus
