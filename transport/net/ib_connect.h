// Connection setup for the IB net, both sides. A TCP connection carries the out-of-band
// exchange; each side creates a CQ and an RC queue pair on its port, and they trade
// their QpInfo (ib_net_wire.h):
//
//   sender (connect):  TCP connect, create QP (INIT), send info, receive the receiver's,
//                      RTR -> RTS, send the ready byte; done.
//   receiver (accept): receive the sender's info, create QP (INIT), RTR -> RTS, send
//                      its info, receive the ready byte; done.
//
// The receiver's QP reaches RTR before the sender learns its number, so the sender's
// first SEND never finds a QP that is not listening. Each QpInfo proves the listener's
// key from the handle (ib_net_wire.h): the receiver checks the sender's before it creates
// anything, so a process that connects without the handle is dropped. Every step moves only what the
// socket allows, so connect() and accept() never block.
//
// Addressing: RoCE ports use the GRH with the chosen GID (is_global, NCCL_IB_TC,
// hop limit 255); InfiniBand ports use the peer's LID without a GRH, so both ports must
// be in one subnet (no routing between IB subnets).
#pragma once

#include <cstdint>

#include "transport/net/ib_device.h"

namespace chorus {

// NCCL_IB_* settings read once at init; out-of-range values WARN and fall back.
struct IbSettings {
  int gidIndex = -1;     // NCCL_IB_GID_INDEX: -1 chooses (chooseRoceGid)
  int trafficClass = 0;  // NCCL_IB_TC [0, 255]
  int serviceLevel = 0;  // NCCL_IB_SL [0, 15]
  int timeout = 20;      // NCCL_IB_TIMEOUT [1, 31]: 4.096 us * 2^timeout per retry
  int retryCount = 7;    // NCCL_IB_RETRY_CNT [0, 7]
};
IbSettings readIbSettings();

}  // namespace chorus

#if CHORUS_HAVE_IBVERBS

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/socket.h"
#include "nccl.h"
#include "transport/net/ib_comm.h"
#include "transport/net/ib_net_wire.h"
#include "transport/net/tcp_stream.h"

namespace chorus {

// One side of a connection while it is being set up.
class IbHandshake {
 public:
  using Clock = std::chrono::steady_clock;

  // Sender: `stream` is connecting to the listener. Receiver: it was just accepted.
  // `key`: the listener's (from its handle), which each side's QpInfo proves.
  IbHandshake(bool sending, const IbPort& port, const IbSettings& settings, const SipKey& key, TcpStream stream);

  // Moves the setup along; `*done` once takeComm() may be called. An error from the peer
  // (closed, malformed) is ncclRemoteError; a local verbs failure ncclSystemError and
  // sets failedLocally().
  ncclResult_t progress(bool* done);
  bool failedLocally() const { return failedLocally_; }
  std::unique_ptr<IbComm> takeComm();

  std::string peerName() const { return stream_.peerName(); }
  Clock::time_point since() const { return since_; }

 private:
  enum class Step : uint8_t { Connect, CreateQp, SendInfo, RecvInfo, ConnectQp, SendReady, RecvReady, Done };

  ncclResult_t runStep(Step step, bool* finished);
  ncclResult_t createQp();
  ncclResult_t connectQp();
  ncclResult_t sendPart(const void* data, size_t size, bool* finished);
  ncclResult_t recvPart(void* data, size_t size, const char* what, bool* finished);
  ncclResult_t modifyQp(ibv_qp_attr* attr, int mask, const char* state);

  bool sending_;
  IbPort port_;
  IbSettings settings_;
  SipKey key_;
  TcpStream stream_;
  const Step* step_;  // into the sender's or the receiver's sequence, ends at Done
  size_t moved_ = 0;  // bytes of the current step's message
  Clock::time_point since_ = Clock::now();
  bool failedLocally_ = false;
  uint32_t psn_;
  ib_net_wire::QpInfo mine_{};
  ib_net_wire::QpInfo peer_{};
  uint8_t ready_ = ib_net_wire::kReadyByte;
  IbCq cq_;
  IbQp qp_;
};

// The receiver's listening socket and the handshakes in progress on it.
class IbListener {
 public:
  IbListener(Socket socket, const IbPort& port, const IbSettings& settings, const SipKey& key)
      : socket_(std::move(socket)), port_(port), settings_(settings), key_(key) {}

  // Accepts what is queued, moves every handshake along and hands out the first finished
  // comm (null when none is). Handshakes that fail for the peer's or the socket's sake,
  // or take longer than 30 s, are dropped with a WARN; a local verbs failure is returned.
  ncclResult_t progress(std::unique_ptr<IbComm>* comm);

  std::string address() const { return socket_.address().toString(); }
  const IbPort& port() const { return port_; }

 private:
  Socket socket_;
  IbPort port_;
  IbSettings settings_;
  SipKey key_;
  std::vector<std::unique_ptr<IbHandshake>> pending_;
};

}  // namespace chorus

#endif  // CHORUS_HAVE_IBVERBS
