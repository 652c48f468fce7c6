// One-sided operations on memory windows (ncclPutSignal, ncclSignal, ncclWaitSignal) on
// host memory: between ranks of one process, of one host and of different hosts.
//
// The first window registered on a communicator connects every pair of its ranks once
// more, both ways, through the transport the pair gets anyway (P2P, SHM or NET), with
// FIFOs of Simple slots. A put is written into its connection by the calling thread; on
// the target rank a service thread drains every incoming connection as steps arrive
// (src/rma/rma_wire.h), copies each payload into the window the step names, and counts
// the sender's signal once the put's last step has landed. A put therefore never waits
// for its target to call anything, and ranks that put to each other cannot deadlock.
// ncclWaitSignal waits until enough signals have been counted and consumes them: two
// waits for one signal each need two signals. A put's data is in the target's window
// once the target's wait for its signal returns (NCCL's guarantee); the steps of one
// sender to one target land in the order they were issued.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"
#include "src/comm/comm.h"

namespace chorus {

struct ExecContext;  // device/cpu/cpu_exec.h

// What a put moves: `bytes` from `src` to `offset` in the target's copy of the window
// registered as number `windowSeq`.
struct RmaData {
  uint64_t windowSeq;
  size_t offset;
  const void* src;
  size_t bytes;
};

class RmaService {
 public:
  // Starts the service thread when the communicator has peers; its connections are made.
  explicit RmaService(ncclComm* comm);
  ~RmaService();  // stops the thread; steps still in flight are dropped
  RmaService(const RmaService&) = delete;
  RmaService& operator=(const RmaService&) = delete;

  // Moves `data` (none: ncclSignal) to `peer`, then signals `peer` when `signal`. Returns
  // once the data is on its way: its source may be reused. Arguments are checked by the
  // caller (src/api/window_api.cc).
  ncclResult_t put(int peer, const std::optional<RmaData>& data, bool signal);
  // Waits until every descriptor's signals have been counted, then consumes them.
  ncclResult_t waitSignals(std::span<const ncclWaitSignalDesc_t> descs);

 private:
  void serve();
  // Handles the steps that have arrived from `peer`; true when there was any.
  bool drain(int peer);
  // Lands one step; false (with a WARN) when it cannot be trusted.
  bool land(int peer, const char* step, int64_t bytes);
  // Copies a payload into this rank's window number `seq`; the reason when it cannot.
  std::string landPayload(uint64_t seq, uint64_t offset, const void* src, uint64_t bytes);
  void countSignal(int peer);
  void failPeer(int peer, const std::string& why);
  // Why a wait for `peer` cannot succeed ("" when it still can): a broken connection, a
  // dead peer process, a step that could not land.
  std::string peerTrouble(int peer);

  ncclComm* comm_;
  std::mutex mutex_;  // guards the counts and failures; the condition wakes waits
  std::condition_variable signalled_;
  std::vector<uint64_t> received_;  // signals counted from each peer
  std::vector<uint64_t> consumed_;  // of which waits have consumed
  std::vector<std::string> failed_;
  std::mutex sendMutex_;  // one put at a time writes the send connections
  // How a put waits for free slots; a failure sticks, as the communicator's does.
  std::unique_ptr<ExecContext> sendWaits_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The collective part of ncclCommWindowRegister: all ranks agree that `win` is the same
// window (its place among the communicator's registrations) and learn each other's size
// and memory kind; the first window also connects the ranks for one-sided calls and
// starts the communicator's RmaService.
ncclResult_t shareWindow(ncclComm* comm, ncclWindow_vidmem* win);

}  // namespace chorus
