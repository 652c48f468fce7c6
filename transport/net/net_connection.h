// One direction of a NET connection at one end: the local proxied FIFO its executor
// uses (step_fifo.h) and the net comm the proxy thread moves that FIFO's slots over.
//
// Sender end:   executor fills slot s, publishes sizes[s] and tail; the proxy isends the
//               slot and, once the send completed, publishes head (the slot is free).
// Receiver end: the proxy irecvs into every free slot (head tells which) and, once a
//               message arrived, publishes its size and tail; the executor consumes it
//               and publishes head.
// A net error, or `broken` set by the local executor, closes the comm: the peer's proxy
// then sees its connection fail, sets `broken` there, and the peer's executor gives up.
// The proxy's publishes wake an executor asleep on the counter (core/futex.h); the
// executor's ring the proxy while it sleeps on what waitSet() names (proxy.h).
// A CPU executor may also run the connection's progress itself (drive, FifoEnd::drive):
// it sends a small step it just published, and reads the step it waits for, on its own
// thread, which spares the two thread hand-offs a hop through the proxy costs. One thread
// at a time moves a connection (`busy_`); the other skips it for that pass.
// Where each end is (StepFifoControl::sender and ::receiver, step_stamps.h) the executors
// write into their own FIFO; the proxies relay it over the net's notes (Net::sendNote),
// so that a long wait compares the calls of both ends as on a direct FIFO. Only the proxy's
// passes that moved nothing relay (one in kRelayEveryIdlePasses), and a record goes out once
// it has stayed the same for kRelayAfter (a busy connection sends no notes), and
// the sender's is applied at the receiver only once the steps sent before it are in: a
// record never says that the sender moved on while its steps could still arrive. A net
// without notes (IB, plugins) gets a TCP note link of the connection's own (note_link.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "transport/net/net.h"
#include "transport/net/note_link.h"
#include "transport/net/proxy.h"
#include "transport/net/proxy_op_trace.h"
#include "transport/transport.h"

namespace chorus {

// GPUDirect RDMA (transport.h's netBuffersOnGpu): the slots in GPU `device`'s memory, which
// the NIC reads or writes, registered through a dma-buf where the net takes one (`dmaBuf`).
// The control block stays in host memory, where the proxy and the host read it.
struct NetGpuSlots {
  const GpuFifoMemory* memory = nullptr;  // null: the slots are host memory
  int device = -1;
  bool dmaBuf = false;
  bool flush = true;  // received data is flushed to the GPU before the kernel learns of it
};

class NetConnection final : public ProxyConnection, public ConnectionResource {
 public:
  enum class State { Connecting, Ready, Failed };

  // allocated() says whether the memory was had (`*why` names the failure otherwise).
  NetConnection(Net& net, const FifoLayout& layout, int peerRank, bool sending, const NetGpuSlots& gpu = {},
                std::string* why = nullptr);
  // Leaves the proxy first, then closes the net comms and frees the FIFO.
  ~NetConnection() override;
  NetConnection(const NetConnection&) = delete;
  NetConnection& operator=(const NetConnection&) = delete;

  bool allocated() const { return memory_ != nullptr && buffer_ != nullptr; }
  void* memory() const { return memory_; }
  // Points `end` at the FIFO: the control block and the slots.
  void attach(const FifoLayout& layout, FifoEnd* end) const;

  // Receiver: listens on `dev`, writing the handle the sender connects with, and, over a
  // net without notes, `*noteLink` for a note link (note_link.h; magic 0: none).
  ncclResult_t listen(int dev, void* handle, NoteLinkHandle* noteLink);
  // Sender: the local device to connect from, the receiver's handles, and what the
  // communicator asks of the connection (its traffic class).
  void setPeerHandle(int dev, const void* handle, const NetCommConfig& config, const NoteLinkHandle& noteLink);
  // Hands the connection to the proxy, which connects (or accepts) and then moves data.
  void start();

  bool progress() override;
  bool waitSet(std::vector<pollfd>* fds) override;
  // FifoEnd::drive for the executor (`self`: this connection). Moves what it can unless
  // another thread is moving it, or a send of more than kDriveMaxBytes is waiting (that
  // one stays the proxy's, so that it overlaps the executor's work). True when the proxy
  // is not needed for what was published: every step sent and complete, or, receiving,
  // the freed slots given to the net.
  static bool drive(void* self);
  void announceSleep(uint32_t bell) override;
  void drivenByKernel() override { drivenByKernel_.store(true); }
  ncclResult_t awaitReady(FifoEnd* end, const std::atomic<uint32_t>* abortFlag,
                          const std::atomic<uint32_t>* revokeFlag) override;
  // The sender's staging slots once every step has gone out; never the receiver's, into
  // which the proxy may be receiving the peer's next step at any time.
  size_t releaseIdleSlots() override;
  // A profiler's ProxyOp over this connection's steps (proxy_op_trace.h).
  bool traceProxyOp(const ProxyOpTrace& op) override;
  // Sends what the executor published first (as the destructor would), so that their steps are reported.
  void stopTracing() override;
  size_t gpuBytes() const override { return gpu_.memory != nullptr ? stride_ * nSlots_ : 0; }
  std::string describe() const override;

 private:
  bool progressExclusive();  // `busy_` held
  bool progressConnect();
  bool progressSend();
  bool progressRecv();
  ncclResult_t registerSlots(void* comm);
  // Marks the FIFO broken, closes the comms, and stops.
  void fail(const char* call, ncclResult_t result);
  void closeComms();
  void drainSends();
  // Publishes head or tail to the executor and wakes it if it sleeps on it.
  void publish(uint64_t* counter, uint64_t value);
  // Relays this end's record to the peer and applies the peer's (see the header comment).
  void relayCalls();
  // Notes over the net's own, or over the note link where the net has none.
  bool takeNote(void* comm, PeerCall* note, uint64_t* after);
  bool sendNote(void* comm, const PeerCall& note);
  PeerCall* ownRecord() const { return sending_ ? &ctrl_->sender : &ctrl_->receiver; }
  PeerCall* peerRecord() const { return sending_ ? &ctrl_->receiver : &ctrl_->sender; }
  char* slot(uint64_t step) const { return buffer_ + (step & (nSlots_ - 1)) * stride_; }

  Net& net_;
  const bool sending_;
  const int peer_;
  int dev_ = 0;
  char handle_[kNetHandleSize] = {};  // the sender's connect() may keep its progress here
  NetCommConfig config_;
  void* memory_ = nullptr;
  StepFifoControl* ctrl_ = nullptr;
  char* buffer_ = nullptr;
  uint64_t nSlots_ = 0;
  size_t stride_ = 0;
  size_t bytes_ = 0;
  NetGpuSlots gpu_;

  NetListenComm* listenComm_ = nullptr;
  NetSendComm* sendComm_ = nullptr;
  NetRecvComm* recvComm_ = nullptr;
  NetMemHandle* mhandle_ = nullptr;
  NetRequest* requests_[kMaxSteps] = {};
  uint64_t posted_ = 0;  // steps handed to the net
  uint64_t done_ = 0;    // steps the net has completed
  bool inProxy_ = false;
  std::atomic<bool> busy_{false};  // a thread runs progressExclusive() or waitSet() now
  // Relaying records (relayCalls): the own record's generation last seen and since when,
  // the last one sent, when to read the peer's notes next, and a sender's record held
  // until the steps sent before it are in (`heldAfter_`).
  bool notes_ = false;
  std::unique_ptr<NoteLink> noteLink_;  // over a net without notes (note_link.h)
  NoteLinkHandle peerNoteLink_{};       // a sender's: the receiver's offer
  uint64_t idlePasses_ = 0;             // the proxy's passes that moved nothing
  uint64_t seenGeneration_ = 0;
  uint64_t sentGeneration_ = 0;
  std::chrono::steady_clock::time_point seenAt_{};
  std::chrono::steady_clock::time_point nextTake_{};
  PeerCall held_{};
  uint64_t heldAfter_ = 0;
  bool holding_ = false;
  ProxyOpTracer trace_;  // events of a profiler plugin; inactive without one
  std::atomic<State> state_{State::Connecting};
  std::atomic<bool> drivenByKernel_{false};
};

}  // namespace chorus
