// Forcing an algorithm and protocol, and shrinking the FIFOs so that slot and
// FIFO boundaries fall at small element counts (shared by the protocol, stress
// and tuning tests).
//
// Slot payloads, as NCCL lays out its buffers (BUFFSIZE / STEPS bytes per slot):
//   Simple: the whole slot;
//   LL:     16-byte lines of 8 payload bytes (half the slot);
//   LL128:  128-byte lines of 120 payload bytes (whole lines only).
// With the test sizes below and 8 steps: Simple 8192 B, LL 1024 B, LL128 1920 B.
#pragma once

#include <cstddef>
#include <string>

#include "harness/scoped_env.h"

namespace chorus_test {

enum class Proto { kSimple, kLL, kLL128 };
enum class Algo { kRing, kTree };

const char* protoName(Proto proto);  // "Simple", "LL", "LL128" (NCCL_PROTO spelling)
const char* algoName(Algo algo);     // "Ring", "Tree" (NCCL_ALGO spelling)

constexpr size_t kTestSimpleBuffBytes = 65536;
constexpr size_t kTestLlBuffBytes = 16384;
constexpr size_t kTestLl128BuffBytes = 16384;

struct FifoSettings {
  int steps = 8;     // NCCL_STEPS
  int channels = 1;  // NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS
  // NCCL_BUFFSIZE, NCCL_LL_BUFFSIZE, NCCL_LL128_BUFFSIZE (and the CHORUS_P2P_ ones).
  size_t simpleBuffBytes = kTestSimpleBuffBytes;
  size_t llBuffBytes = kTestLlBuffBytes;
  size_t ll128BuffBytes = kTestLl128BuffBytes;
};

// Sets the buffer sizes (collective and send/recv FIFOs), steps and an exact channel count.
void applyFifoSettings(ScopedEnv& env, const FifoSettings& settings);

// Payload bytes of one slot of `proto`: the buffer split in `steps` slots, each rounded
// down to whole lines (64 B for Simple's copies, 16 B for LL, 128 B for LL128).
size_t slotPayloadBytes(Proto proto, const FifoSettings& settings);
inline size_t slotPayloadBytes(Proto proto, int steps) {
  FifoSettings settings;
  settings.steps = steps;
  return slotPayloadBytes(proto, settings);
}

}  // namespace chorus_test
