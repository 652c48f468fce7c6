// The GPU buffers of an SHM connection: between GPU communicators in different processes
// of one host (buffersOnReceiverGpu), the FIFO's control block stays in /dev/shm and its
// buffers are the receiver's GPU memory, which the sender maps through CUDA IPC. NCCL's
// way first: a cuMem allocation whose file descriptor the sender fetches from the
// receiver's process (core/fd_handout.h); where the driver cannot, the legacy 64-byte
// handle that travels in the ConnectHandle. A legacy allocation must outlive the sender's
// mapping, so a receiver that goes first leaves it in a list that later releases look at
// again (the sender says when it has unmapped, in the word after the control block).
//
// NCCL's P2P read across processes (simpleSlotsOnSenderGpu, on a collective channel's
// connection, whose two ends are set up together): the Simple slots are the sender's GPU
// memory instead, allocated when it attaches and shared the same ways the other way round,
// through the segment after the control block; the receiver maps them before the
// connection is first used (ConnectionResource::awaitReady).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transport/transport.h"

namespace chorus {

// The control block and the word after it: the size of an SHM segment whose buffers are on a GPU.
size_t gpuFifoSegmentBytes();

// One side's hold on a connection's GPU buffers: the receiver's allocation or the sender's
// mapping of it.
struct GpuBuffers {
  const GpuFifoMemory* memory = nullptr;  // null: none (the FIFO is all in /dev/shm)
  int device = -1;
  void* address = nullptr;
  bool imported = false;  // the sender's mapping (closeImported), not the allocation (release)
  bool byFd = false;      // shared by file descriptor (`ticket`), not by legacy handle
  FdTicket ticket{};      // the owner's offer of the descriptor, withdrawn when it lets go
  bool slots = false;     // the Simple slots under P2P read (the sender's), not the buffers (the receiver's)
};

// Receiver: allocates `layout`'s buffers on its GPU (but the Simple slots when they are on
// the sender's) and fills `handle`'s GPU fields so that the sender can map them. Errors come
// with a WARN; nothing is left allocated.
ncclResult_t shareReceiverBuffers(const FifoLayout& layout, bool slotsOnSender, const PeerInfo& self,
                                  const PeerInfo& peer, const LinkContext& link, ConnectHandle* handle,
                                  GpuBuffers* out);

// Sender: maps the receiver's buffers named by `handle` for its own GPU, and says so in the
// segment at `base`. Errors come with a WARN naming the peer and the cause.
ncclResult_t mapSenderBuffers(const ConnectHandle& handle, void* base, const PeerInfo& self, const PeerInfo& peer,
                              const LinkContext& link, GpuBuffers* out);

// P2P read, sender: allocates `layout`'s Simple slots on its GPU and shares them through
// the segment at `base` (or says there that it could not, so the receiver does not wait).
// Errors come with a WARN; nothing is left allocated.
ncclResult_t shareSenderSlots(const FifoLayout& layout, void* base, const PeerInfo& self, const PeerInfo& peer,
                              const LinkContext& link, GpuBuffers* out);

// P2P read, sender: tells the receiver that no slots will come (this end failed before
// sharing them), so that its wait ends at once.
void sayNoSenderSlots(void* base);

// P2P read, receiver: waits until the sender has shared its Simple slots through the
// segment at `base` (until either flag is set, the peer process `peerAlive` dies, or
// CHORUS_BOOTSTRAP_TIMEOUT), then maps them (`layout`'s Simple slots) for its own GPU.
// Errors come with a WARN.
ncclResult_t mapReceiverSlots(void* base, const FifoLayout& layout, const GpuFifoMemory& memory, int rank, int device,
                              int peerRank, int peerAlive, uint64_t peerProcessId,
                              const std::atomic<uint32_t>* abortFlag, const std::atomic<uint32_t>* revokeFlag,
                              GpuBuffers* out);

// Lets go of a mapped segment (`base`, `bytes`), the GPU memory held with it (`buffers`, and
// under P2P read `slots`) and the peer's liveness handle: a mapping is closed and said so;
// an allocation is freed now or, a legacy one still mapped by a live peer, once that has
// changed.
void letGoOfSegment(void* base, size_t bytes, const GpuBuffers& buffers, const GpuBuffers& slots, int peerAlive,
                    uint64_t peerProcessId);

}  // namespace chorus
