// What one step of a one-sided connection carries (src/rma/rma_service.h).
//
// Every step of a one-sided connection is self-describing: a RmaStepHeader, then
// `payloadBytes` of the put's data, which land at `offset` in the receiver's window
// number `windowSeq`. A put larger than a slot takes several steps; only its last step
// carries kRmaSignal, so the signal counts once the whole put has landed. ncclSignal is one
// step without payload. The FIFO's `sizes` entry of the step (header plus payload) lets
// the receiver refuse a step whose header disagrees with what arrived.
#pragma once

#include <cstdint>

namespace chorus {

constexpr uint32_t kRmaStepMagic = 0x524d4131;  // "RMA1"

enum RmaStepFlags : uint32_t {
  kRmaPut = 1u << 0,     // the step carries data for a window
  kRmaSignal = 1u << 1,  // the receiver counts one signal from the sender once the step has landed
};

struct RmaStepHeader {
  uint32_t magic;
  uint32_t flags;
  uint64_t windowSeq;     // the window's place among the communicator's registrations
  uint64_t offset;        // where the payload lands in the receiver's window
  uint64_t payloadBytes;  // bytes after this header
  uint32_t sigIdx;
  uint32_t ctx;
  uint64_t pad[3];  // a whole 64-byte header keeps the payload aligned for the copy
};
static_assert(sizeof(RmaStepHeader) == 64);

}  // namespace chorus
