#include "transport/net/note_link.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "core/debug.h"
#include "core/interfaces.h"

namespace chorus {

ncclResult_t NoteLink::listen(NoteLinkHandle* handle, std::unique_ptr<NoteLink>* out) {
  NetInterface interface;
  CHORUS_CHECK(findBootstrapInterface(AF_UNSPEC, &interface));
  Socket socket;
  CHORUS_CHECK(Socket::listen(interface.address, &socket));
  NoteLinkHandle wire{};
  wire.magic = kNoteLinkMagic;
  wire.addressLength = socket.address().length();
  memcpy(wire.address, socket.address().sa(), wire.addressLength);
  if (getrandom(wire.key, sizeof(wire.key), 0) != static_cast<ssize_t>(sizeof(wire.key))) {
    WARN("NET: a note link's key: getrandom failed: %s", strerror(errno));
    return ncclSystemError;
  }
  std::unique_ptr<NoteLink> link(new NoteLink);
  link->listener_ = std::make_unique<SocketListener>(std::move(socket), 0, SipKey{wire.key[0], wire.key[1]});
  link->state_ = State::Listening;
  *handle = wire;
  *out = std::move(link);
  return ncclSuccess;
}

ncclResult_t NoteLink::connect(const NoteLinkHandle& handle, int trafficClass, std::unique_ptr<NoteLink>* out) {
  SocketAddress address;
  if (handle.magic != kNoteLinkMagic || handle.addressLength > sizeof(handle.address) ||
      !address.assign(reinterpret_cast<const sockaddr*>(handle.address), handle.addressLength)) {
    WARN("NET: not a note link handle (magic %llx, address length %u)", static_cast<unsigned long long>(handle.magic),
         handle.addressLength);
    return ncclInvalidArgument;
  }
  std::unique_ptr<NoteLink> link(new NoteLink);
  link->pending_ = std::make_unique<PendingConnect>(address, 0, trafficClass, SipKey{handle.key[0], handle.key[1]});
  CHORUS_CHECK(link->pending_->start());
  link->peer_ = address.toString();
  link->state_ = State::Connecting;
  *out = std::move(link);
  return ncclSuccess;
}

NoteLink::~NoteLink() = default;

void NoteLink::fail(const char* why) {
  INFO(kSubsysNet, "NET: the note link%s%s %s; its connection's calls are no longer relayed",
       peer_.empty() ? "" : " with ", peer_.c_str(), why);
  state_ = State::Failed;
  listener_.reset();
  pending_.reset();
  stream_.close();
}

void NoteLink::send(const void* note, uint64_t after) {
  if (!alive()) return;
  NoteFrame& frame = outDone_ > 0 ? next_ : out_;  // a frame under way finishes first
  frame.magic = kNoteFrameMagic;
  frame.after = after;
  memcpy(frame.note, note, kNetNoteBytes);
  (outDone_ > 0 ? nextPending_ : outPending_) = true;
  progress();
}

bool NoteLink::take(void* note, uint64_t* after) {
  progress();
  if (!fresh_) return false;
  memcpy(note, latest_.note, kNetNoteBytes);
  *after = latest_.after;
  fresh_ = false;
  return true;
}

void NoteLink::progress() {
  if (state_ == State::Listening) {
    std::vector<TcpStream> complete;
    if (listener_->progress(&complete) != ncclSuccess) return fail("could not accept");
    if (complete.empty()) return;
    stream_ = std::move(complete[0]);
    peer_ = stream_.peerName();
    listener_.reset();
    state_ = State::Connected;
  }
  if (state_ == State::Connecting) {
    bool ready = false;
    if (pending_->progress(&ready) != ncclSuccess) return fail("could not connect");
    if (!ready) return;
    stream_ = std::move(pending_->takeStreams()[0]);
    pending_.reset();
    state_ = State::Connected;
  }
  if (state_ != State::Connected) return;
  // Out: the frame under way, then the one queued behind it.
  while (outPending_) {
    size_t sent = 0;
    if (stream_.sendSome(reinterpret_cast<const char*>(&out_) + outDone_, sizeof(out_) - outDone_, nullptr, 0, &sent,
                         /*warn=*/false) != ncclSuccess)
      return fail("was closed by the peer");
    outDone_ += sent;
    if (outDone_ < sizeof(out_)) break;
    outDone_ = 0;
    outPending_ = nextPending_;
    if (nextPending_) out_ = next_;
    nextPending_ = false;
  }
  // In: every whole frame there is; the newest wins.
  for (;;) {
    size_t n = 0;
    bool closed = false;
    if (stream_.recvSome(reinterpret_cast<char*>(&in_) + inDone_, sizeof(in_) - inDone_, &n, &closed) != ncclSuccess)
      return fail("failed");
    inDone_ += n;
    if (inDone_ == sizeof(in_)) {
      inDone_ = 0;
      if (in_.magic != kNoteFrameMagic) return fail("sent a malformed note");
      latest_ = in_;
      fresh_ = true;
      continue;
    }
    if (closed) return fail("was closed by the peer");
    if (n == 0) return;
  }
}

}  // namespace chorus
