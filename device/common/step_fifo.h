// StepFifo: the connector between a sender and a receiver, as both executors see it.
//
// The receiver owns NCCL_STEPS slots of `slotBytes` each. Two 64-bit counters that
// never wrap order the hand-off:
//   tail — steps produced, written by the sender after the slot's data (release),
//          read by the receiver (acquire) before it reads the slot;
//   head — steps consumed, written by the receiver once it is done with a slot,
//          read by the sender before it overwrites that slot.
// The sender may fill step s once s - head < nSlots; the receiver may read step s
// once tail - s > 0 (differences, so a wrap of the 64-bit counters is harmless). `sizes[s % nSlots]` carries the bytes of each step so a receiver
// can detect a mismatched send/recv instead of reading garbage.
// Where this block and the slots live (heap, POSIX shared memory, pinned or GPU
// memory) is the transport's business; the algorithms only see a FifoEnd.
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus {

constexpr int kNcclSteps = 8;
constexpr size_t kCacheLine = 128;  // keeps the two counters on separate lines (also on GPUs)

struct StepFifoControl {
  alignas(kCacheLine) uint64_t tail;
  alignas(kCacheLine) uint64_t head;
  alignas(kCacheLine) int64_t sizes[kNcclSteps];
};

// One side of a connection: where the control block and slots are, plus this
// side's own step counter.
struct FifoEnd {
  StepFifoControl* ctrl = nullptr;
  char* slots = nullptr;   // nSlots * slotBytes
  size_t slotBytes = 0;
  int nSlots = kNcclSteps;
  uint64_t step = 0;       // next step this side will produce (sender) or consume (receiver)
  int peer = -1;           // the rank at the other end, for error messages
  int peerPid = 0;         // that rank's process, to notice it dying (0: same process)

  char* slot(uint64_t s) const { return slots + (s % nSlots) * slotBytes; }
};

// Bytes of shared memory a transport lays out for one connection.
inline size_t fifoBytes(size_t slotBytes, int nSlots) { return sizeof(StepFifoControl) + slotBytes * nSlots; }

}  // namespace chorus
