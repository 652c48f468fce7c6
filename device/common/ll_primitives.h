// Primitives of the LL ("low latency") protocol: the line pipeline (line_pipeline.h) over
// 16-byte lines, half of each a flag.
//
// LL line format (16 bytes, little-endian, as NCCL's {data1, flag1, data2, flag2}):
//   word 0 (8 B): bits 0..31 payload bytes 0..3, bits 32..63 flag
//   word 1 (8 B): bits 0..31 payload bytes 4..7, bits 32..63 flag
//   flag = (uint32_t)(step + 1), so the zeroed buffer of a fresh connection holds no step.
// Each word is one untorn 8-byte store, so data and flag travel together and no other
// ordering is needed; the receiver polls a line's words until both flags equal the
// step's. Single lines move with Exec::storeRelaxed / loadRelaxed; whole blocks with
// Exec::storeWords / loadWords (each word untorn, no order among them), packed and
// unpacked in local memory where the compiler can vectorise the format's shuffles —
// on the CPU, per-line scalar work otherwise costs more than the data movement.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/common/line_pipeline.h"
#include "device/common/platform.h"

namespace chorus {

struct LLFormat {
  static constexpr Protocol kProtocol = Protocol::LL;
  static constexpr size_t kLineBytes = 16;
  static constexpr size_t kLineWords = 2;
  static constexpr size_t kPayloadBytes = 8;
  static constexpr size_t kBlockLines = 128;  // 1 KiB of payload staged at a time

  using Flag = uint32_t;
  static CHORUS_HD Flag flagOf(uint64_t step) { return static_cast<Flag>(step + 1); }

  // Writes `count` lines from `payload` (count * 8 bytes).
  template <typename Exec>
  static CHORUS_HD void writeLines(uint64_t* line, const unsigned char* payload, size_t count, Flag flag) {
    const uint64_t high = static_cast<uint64_t>(flag) << 32;
    for (size_t i = 0; i < count; ++i) {
      uint64_t data;  // staging buffers are 8-byte aligned, and a line holds one word
      copyAlignedWords(&data, payload + i * kPayloadBytes, sizeof(data));
      Exec::storeRelaxed(line + 2 * i, (data & 0xffffffffu) | high);
      Exec::storeRelaxed(line + 2 * i + 1, (data >> 32) | high);
    }
  }

  // Writes `count` lines of zero payload (the periodic refresh).
  template <typename Exec>
  static CHORUS_HD void writeEmptyLines(uint64_t* line, size_t count, Flag flag) {
    for (size_t i = 0; i < 2 * count; ++i) Exec::storeRelaxed(line + i, static_cast<uint64_t>(flag) << 32);
  }

  // Block forms, on local memory: `words` holds `count` lines in the wire format.
  static constexpr bool kBlockMoves = true;
  static CHORUS_HD void packLines(uint64_t* words, const unsigned char* payload, size_t count, Flag flag) {
    const uint64_t high = static_cast<uint64_t>(flag) << 32;
    for (size_t i = 0; i < 2 * count; ++i) {
      uint32_t half;
      __builtin_memcpy(&half, payload + 4 * i, sizeof(half));
      words[i] = half | high;
    }
  }
  // Unpacks every line; true when all of them carry `flag` (else `payload` is partly stale).
  static CHORUS_HD bool unpackLines(const uint64_t* words, size_t count, Flag flag, unsigned char* payload) {
    uint32_t mismatch = 0;
    for (size_t i = 0; i < 2 * count; ++i) {
      mismatch |= static_cast<uint32_t>(words[i] >> 32) ^ flag;
      const uint32_t half = static_cast<uint32_t>(words[i]);
      __builtin_memcpy(payload + 4 * i, &half, sizeof(half));
    }
    return mismatch == 0;
  }

  // Copies the line's payload to `out` once both of its words carry `flag`.
  template <typename Exec>
  static CHORUS_HD bool tryRead(const uint64_t* line, Flag flag, unsigned char* out) {
    const uint64_t w0 = Exec::loadRelaxed(line);
    const uint64_t w1 = Exec::loadRelaxed(line + 1);
    if (static_cast<Flag>(w0 >> 32) != flag || static_cast<Flag>(w1 >> 32) != flag) return false;
    const uint64_t data = (w0 & 0xffffffffu) | (w1 << 32);
    copyAlignedWords(out, &data, sizeof(data));
    return true;
  }
};

template <typename T, typename Op, typename Exec>
using LLPrimitives = LinePrimitives<T, Op, Exec, LLFormat>;

}  // namespace chorus
