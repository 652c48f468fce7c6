// A side channel for notes (Net::sendNote) beside a net that carries none: the IB net and
// external net plugins. Each NET connection over such a net gets one TCP connection of
// its own between its two proxies, on the bootstrap's interface, that carries only the
// records of where each end is (PeerCall), so that a wait no step will ever end (a Reduce
// whose ranks name different roots) learns the peer's call there as over the socket net.
//
// The receiving end listens and puts a NoteLinkHandle (address and a random key) in the
// connection's handle; the sending end connects and proves the key as a socket net socket
// does (socket_net_wire.h's Hello, no data sockets). Then each side sends NoteFrames:
// fixed size, so nothing is allocated from what a peer announces. In-stream order cannot
// place a note behind the messages sent before it, so the frame says how many there were
// (`after`), and the receiver holds the record until that many have arrived.
//
// Best effort: a link that fails (the peer closed, a malformed frame, a connection that
// never comes) goes quiet with an INFO line, and the data connection is untouched; waits
// then end at CHORUS_TIMEOUT as they would without it. Never blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/keyed_hash.h"
#include "nccl.h"
#include "transport/net/net.h"
#include "transport/net/pending_connect.h"
#include "transport/net/socket_listener.h"
#include "transport/net/tcp_stream.h"

namespace chorus {

// What the receiving end sends the sending end (inside the connection's ConnectHandle).
struct NoteLinkHandle {
  uint64_t magic;  // kNoteLinkMagic when the receiver offers a link; 0: none
  uint32_t addressLength;
  uint32_t reserved;
  uint8_t address[28];  // a sockaddr_in or sockaddr_in6
  uint32_t pad;
  uint64_t key[2];
};
inline constexpr uint64_t kNoteLinkMagic = 0x43484f5255534e4cull;  // "CHORUSNL"

// One note on the link.
struct NoteFrame {
  uint64_t magic;  // kNoteFrameMagic
  uint64_t after;  // messages the sending end had handed to the net before this note
  uint8_t note[kNetNoteBytes];
};
inline constexpr uint64_t kNoteFrameMagic = 0x4e4f54454652414dull;  // "NOTEFRAM"

class NoteLink {
 public:
  // The receiving end: listens on the bootstrap's interface and fills `*handle`.
  static ncclResult_t listen(NoteLinkHandle* handle, std::unique_ptr<NoteLink>* out);
  // The sending end: starts connecting to the link `handle` offers (magic checked by the caller).
  static ncclResult_t connect(const NoteLinkHandle& handle, int trafficClass, std::unique_ptr<NoteLink>* out);
  ~NoteLink();
  NoteLink(const NoteLink&) = delete;
  NoteLink& operator=(const NoteLink&) = delete;

  // Queues `note` (kNetNoteBytes), replacing one not yet on its way, and moves what it can.
  void send(const void* note, uint64_t after);
  // The newest note arrived and not yet taken, with its `after`; moves what it can first.
  bool take(void* note, uint64_t* after);
  // False once the link has failed (it then says nothing more and takes nothing).
  bool alive() const { return state_ != State::Failed; }
  bool connected() const { return state_ == State::Connected; }

 private:
  enum class State { Listening, Connecting, Connected, Failed };
  NoteLink() = default;
  // Connects or accepts, then sends and reads what the socket takes or holds now.
  void progress();
  void fail(const char* why);

  State state_ = State::Failed;
  std::unique_ptr<SocketListener> listener_;  // the receiving end until the sender is in
  std::unique_ptr<PendingConnect> pending_;   // the sending end until its hello is out
  TcpStream stream_;
  std::string peer_;  // for the INFO line of a failure
  NoteFrame out_{};
  size_t outDone_ = 0;  // bytes of out_ gone; 0 with outPending_: not started
  bool outPending_ = false;
  NoteFrame next_{};  // queued behind a frame under way
  bool nextPending_ = false;
  NoteFrame in_{};
  size_t inDone_ = 0;
  NoteFrame latest_{};
  bool fresh_ = false;
};

}  // namespace chorus
