// Transports lay out the StepFifo of a connection and give each side its FifoEnd.
// They never see collective logic; algorithms never know which transport carries
// a connector. Choice per peer pair: the first of P2P -> SHM -> NET that accepts.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/fd_handout.h"
#include "device/common/step_fifo.h"
#include "nccl.h"
#include "transport/gpu_fifo_memory.h"

namespace chorus {

// What every rank tells the others at init (all-gathered over the bootstrap).
struct PeerInfo {
  int rank;
  int cudaDev;
  int pid;
  uint64_t gpuBusId;    // the GPU's PCI location (gpuBusIdOf), 0 when unknown
  uint64_t hostHash;    // same host <=> same hash (NCCL_HOSTID overrides)
  uint64_t shmDevId;    // st_dev of /dev/shm: same host and same /dev/shm for SHM
  uint64_t processId;   // unique per process even across hosts (host hash ^ pid ^ start time)
  int channelsWanted;   // what this rank's cores can serve; the communicator takes the minimum
  int trafficClass;     // ncclConfig_t.trafficClass for this rank's network connections, or -1
  char netName[32];     // ncclConfig_t.netName: the net this rank's connections use ("": the process's)
  int netMissing;       // 1: the net this rank asked for by name (netName, or NCCL_NET) is not usable
  int deterministic;    // CHORUS_DETERMINISTIC as this rank read it: every rank must agree
  int gpuComm;          // 1: a GPU communicator (its calls run on the CUDA executor)
  int ringPosition;     // a GPU communicator's: its GPU's place in its host's ring (topo::GpuRoute), or -1
  float ringHopGBs;     // ... that ring's narrowest hop (0: unknown)
  int ringOverNvlink;   // ... 1: every hop of that ring is NVLink
  int topoGpu;          // ... its GPU's index among its host topology's GPUs, or -1
  uint64_t gpuReach;    // ... bit i: its GPU can write the memory of that topology's GPU i
  int gpuLanes;         // ... the blocks of the collective kernel its GPU runs at once (0: unknown)
  int gpuArch;          // ... its GPU's compute capability, major * 10 + minor (0: unknown)
  float nicGBs;         // ... GB/s its GPU's network traffic gets (topo::GpuRoute::nicGBs; 0: unknown)
  int lenderRank;       // splitShare/shrinkShare: its rank in the communicator whose connections it would share, or -1
  int boardWanted;      // 1: a CPU communicator's rank that would run small AllReduce calls on a board (board.h)
  uint64_t boardNonce;  // rank 0's, in the second exchange: the name of the board it made (board_memory.h), 0: none
  char hostname[64];
};

// Heap FIFO memory (P2P, NET staging) starts on a page and fills whole pages: a GPU
// communicator registers each FIFO with cudaHostRegister, and two FIFOs sharing a page
// could not be registered (and unregistered) independently.
inline size_t fifoPageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}
inline size_t roundUpToFifoPages(size_t bytes) {
  return (bytes + fifoPageBytes() - 1) / fifoPageBytes() * fifoPageBytes();
}

// ncclCommSuspend: gives the whole pages of [base + from, base + to) back to the system;
// they read as zeros at their next use. `shared`: a MAP_SHARED mapping of /dev/shm, whose
// backing store goes too (MADV_REMOVE); otherwise private memory (MADV_DONTNEED). Returns
// the bytes released (0 with a WARN naming the errno when the kernel refused).
size_t releaseFifoPages(void* base, size_t from, size_t to, bool shared);

// Whether no Simple step waits in a FIFO's slots: every step published (tail) has been
// consumed (head). LL and LL128 steps of a FIFO in shared memory publish no tail, so their
// buffers can never be known idle from here.
inline bool simpleSlotsIdle(const StepFifoControl* ctrl) {
  const uint64_t tail = __atomic_load_n(&ctrl->tail, __ATOMIC_ACQUIRE);
  const uint64_t head = __atomic_load_n(&ctrl->head, __ATOMIC_ACQUIRE);
  return static_cast<int64_t>(tail - head) <= 0;
}

// What the host runtime knows of a pair beyond their PeerInfo: how their GPUs are linked
// and where GPU memory for a FIFO comes from. Both are set only when both ranks are GPU
// communicators of one host; the P2P transport then puts the FIFO's buffers in the
// receiver's GPU memory when the path is within NCCL_P2P_LEVEL.
// For a GPU communicator also the NICs nearest its GPU, which its network connections use.
struct LinkContext {
  int gpuPath = -1;                                    // a PathType (core/path_type.h) between their GPUs, -1: unknown
  bool peerWritesMine = false;                         // the peer's GPU can write this rank's GPU memory
  bool mineReadsPeer = false;                          // this rank's GPU can read the peer's GPU memory
  const GpuFifoMemory* gpuMemory = nullptr;            // null: the FIFO stays in host memory
  const std::vector<std::string>* nearNics = nullptr;  // the topology's names, nearest first; null: none known
  const std::vector<int>* nearNicPaths = nullptr;      // the path (a PathType) from this GPU to each of nearNics
  // Both ends are made and awaited in one set-up (a collective channel's connection), so a
  // receiver may wait in awaitReady for what its sender shares when it attaches (SHM's P2P
  // read). Not so for Send/Recv connections, whose sender may attach at any later call.
  bool setUpTogether = false;
};

// The device of a net with devices named `deviceNames` that a connection to `peerRank`
// uses: the first of `nearNics` (a NIC's name, matching a device named so or "name:port")
// that the net has, else the devices dealt by peer rank.
// `*nearIndex` (where given): the index in nearNics of the NIC chosen, or -1.
int netDeviceFor(const std::vector<std::string>& deviceNames, const std::vector<std::string>* nearNics, int peerRank,
                 int* nearIndex = nullptr);

// GPUDirect RDMA at one end of a NET connection: whether that end's buffers are its GPU's
// memory, which the NIC reads (`sending`) or writes. Each end decides alone, since each has
// a FIFO of its own. Yes when this rank is a GPU communicator (link.gpuMemory), the net's
// device takes GPU memory (`ptrSupport` has kNetPtrCuda), and the path from the GPU to that
// NIC (`nicPath`, a PathType; -1: unknown) is within NCCL_NET_GDR_LEVEL (default PXB, as
// NCCL's); reads also need NCCL_NET_GDR_READ (default: on where the GPU's ring is NVLink, as
// NCCL's). Otherwise `*why` says which.
bool netBuffersOnGpu(const PeerInfo& self, const LinkContext& link, int ptrSupport, int nicPath, bool sending,
                     std::string* why);

// Whether the receiver of `link` keeps the FIFO's buffers in its GPU memory: both are GPU
// communicators, NCCL_P2P_DISABLE is not set, their GPUs are within NCCL_P2P_LEVEL, and the
// sender's GPU can write the receiver's. The P2P and SHM transports decide alike; an INFO
// line names why not.
bool buffersOnReceiverGpu(const PeerInfo& self, const PeerInfo& peer, const LinkContext& link);
// The same decision without the INFO line; `*why` says why not where an INFO line would
// (empty where no GPU memory was in question: a CPU communicator, NCCL_P2P_DISABLE).
bool receiverGpuBuffersAllowed(const PeerInfo& self, const PeerInfo& peer, const LinkContext& link, std::string* why);

// NCCL's P2P read, for a FIFO whose buffers are on the receiver's GPU (`self`, from `peer`'s
// GPU): its Simple slots go on the sender's GPU instead, written there locally and read by
// the receiver's kernels. As NCCL: NCCL_P2P_READ_ENABLE=1 or 0 decides; unset, the GPUs are
// NVLink peers of compute capability 8.0 (Ampere; Hopper writes). Also needs the receiver's
// GPU to reach the sender's (link.mineReadsPeer), and across processes (SHM, where the
// receiver maps the slots once its sender has shared them) link.setUpTogether.
bool simpleSlotsOnSenderGpu(const PeerInfo& self, const PeerInfo& peer, const LinkContext& link);

enum class TransportId : uint32_t { P2p = 1, Shm = 2, Net = 3 };

// ConnectHandle::gpuBuffers.
enum GpuBuffersShared : uint32_t {
  kBuffersInFifo = 0,
  kGpuBuffersInProcess = 1,
  kGpuBuffersByFd = 2,
  kGpuBuffersByHandle = 3
};

// Sent from the receiver to the sender over the bootstrap.
struct ConnectHandle {
  TransportId transport;
  uint32_t gpuBuffers;  // GpuBuffersShared: how the buffers, GPU memory apart from the control block, are shared
  uint64_t bytes;       // size of the mapped FIFO
  FifoLayout layout;
  int32_t ownerPid;
  int32_t slotsOnSender;  // SHM with GPU buffers: 1 under P2P read (the sender shares its Simple slots)
  uint64_t address;       // P2P: the FIFO's address in the shared process
  char shmName[64];       // SHM: the POSIX shared memory object
  char netHandle[128];    // NET: the receiver's listen handle (NCCL_NET_HANDLE_MAXSIZE)
  char noteLink[64];      // NET over a net without notes: the receiver's note link (net/note_link.h)
  // SHM with GPU buffers: the ticket for their descriptor and the allocation's bytes (by
  // file descriptor), or their legacy CUDA IPC handle.
  FdTicket gpuTicket;
  uint64_t gpuBytes;
  char gpuHandle[GpuFifoMemory::kIpcHandleBytes];
  // 1: the receiver uses a connection it already had with the sender (splitShare,
  // src/comm/shared_connections.h) instead of a new FIFO; nothing else is set.
  uint32_t borrowed;
};

struct ProxyOpTrace;  // net/proxy_op_trace.h

// Owns whatever memory or mapping backs one side of a connection.
class ConnectionResource {
 public:
  virtual ~ConnectionResource() = default;
  // Waits until the connection can carry data (NET: connected by the proxy; SHM under P2P
  // read: the receiver has mapped its sender's Simple slots, and points `end` at them), or
  // until either flag (either may be null) is set. Other memory transports are ready at once.
  virtual ncclResult_t awaitReady(FifoEnd* /*end*/, const std::atomic<uint32_t>* /*abortFlag*/,
                                  const std::atomic<uint32_t>* /*revokeFlag*/) {
    return ncclSuccess;
  }
  // ncclCommSuspend: releases the pages of the slots this side owns and that hold nothing
  // still to be read (they come back zeroed, as on a fresh connection, at their next use);
  // nothing when a step still waits or nothing can be known idle. Returns the bytes released.
  virtual size_t releaseIdleSlots() { return 0; }
  // Whether the memory is shared with the peer's end in this process (P2P) and lives until
  // both ends have gone, rather than being this end's alone.
  virtual bool jointlyOwned() const { return false; }
  // A GPU kernel now drives this end: its publishes wake nobody, so whatever waits for
  // them (the NET proxy) must poll instead of sleeping.
  virtual void drivenByKernel() {}
  // NET: reports the steps of a profiler's ProxyOp as it moves them (net/proxy_op_trace.h);
  // false (the op is not taken) where no proxy moves the steps, or the connection failed.
  virtual bool traceProxyOp(const ProxyOpTrace& /*op*/) { return false; }
  // Stops every event it still holds; before the plugin's finalize.
  virtual void stopTracing() {}
  // The GPU memory this side allocated for the FIFO (the receiver's buffers on its GPU).
  virtual size_t gpuBytes() const { return 0; }
  // Where the FIFO lives, for the connection's INFO line ("" when the transport's name says it).
  virtual std::string describe() const { return ""; }
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual TransportId id() const = 0;
  virtual bool canConnect(const PeerInfo& self, const PeerInfo& peer) const = 0;
  // Receiver: lays out the FIFO, fills its own end and the handle for the sender.
  virtual ncclResult_t createReceiver(const FifoLayout& layout, const PeerInfo& self, const PeerInfo& peer,
                                      const LinkContext& link, ConnectHandle* handle, FifoEnd* end,
                                      std::unique_ptr<ConnectionResource>* resource) const = 0;
  // Sender: attaches to the receiver's FIFO.
  virtual ncclResult_t attachSender(const ConnectHandle& handle, const PeerInfo& self, const PeerInfo& peer,
                                    const LinkContext& link, FifoEnd* end,
                                    std::unique_ptr<ConnectionResource>* resource) const = 0;
};

const Transport& p2pTransport();
const Transport& shmTransport();
const Transport& netTransport();

// The first transport that accepts this pair, honouring NCCL_P2P_DISABLE and
// NCCL_SHM_DISABLE; null when none does (a WARN names the peer and why).
const Transport* selectTransport(const PeerInfo& self, const PeerInfo& peer);
const Transport* transportById(TransportId id);

}  // namespace chorus
