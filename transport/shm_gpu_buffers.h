// The GPU buffers of an SHM connection: between GPU communicators in different processes
// of one host (buffersOnReceiverGpu), the FIFO's control block stays in /dev/shm and its
// buffers are the receiver's GPU memory, which the sender maps through CUDA IPC. NCCL's
// way first: a cuMem allocation whose file descriptor the sender fetches from the
// receiver's process (core/fd_handout.h); where the driver cannot, the legacy 64-byte
// handle that travels in the ConnectHandle. A legacy allocation must outlive the sender's
// mapping, so a receiver that goes first leaves it in a list that later releases look at
// again (the sender says when it has unmapped, in the word after the control block).
#pragma once

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
  FdTicket ticket{};      // the receiver's offer of the descriptor, withdrawn when it lets go
};

// Receiver: allocates `layout`'s buffers on its GPU and fills `handle`'s GPU fields so that
// the sender can map them. Errors come with a WARN; nothing is left allocated.
ncclResult_t shareReceiverBuffers(const FifoLayout& layout, const PeerInfo& self, const PeerInfo& peer,
                                  const LinkContext& link, ConnectHandle* handle, GpuBuffers* out);

// Sender: maps the receiver's buffers named by `handle` for its own GPU, and says so in the
// segment at `base`. Errors come with a WARN naming the peer and the cause.
ncclResult_t mapSenderBuffers(const ConnectHandle& handle, void* base, const PeerInfo& self, const PeerInfo& peer,
                              const LinkContext& link, GpuBuffers* out);

// Lets go of a mapped segment (`base`, `bytes`) and the GPU buffers held with it, and of the
// peer's liveness handle: the sender unmaps and says so; the receiver frees its buffers now
// or, for a legacy allocation still mapped by a live sender, once that has changed.
void letGoOfSegment(void* base, size_t bytes, const GpuBuffers& gpu, int peerAlive, uint64_t peerProcessId);

}  // namespace chorus
