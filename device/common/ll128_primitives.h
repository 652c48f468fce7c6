// Primitives of the LL128 protocol: the line pipeline (line_pipeline.h) over 128-byte
// lines, which waste 8 bytes in 128 on flags where LL wastes half of every line.
//
// LL128 line format (128 bytes = 16 little-endian 8-byte words):
//   words 0..14: payload bytes 0..119 of the line (120 B; zero past the data on a step's
//                last line)
//   word 15:     flag = step + 1 (all 64 bits, so the zeroed buffer holds no step)
// One thread moving a whole line (the CPU executor; stamp lines and refreshes everywhere)
// writes the payload words with plain stores, then the flag word with
// Exec::storeReleaseOwn; the receiver Exec::loadAcquire-s the flag word until it equals
// step + 1, then reads the payload.
//
// On a GPU a data line moves as NCCL moves it (Exec::kLineThreads == kPieceThreads): eight
// threads of a warp each hold 16 bytes of it, thread j words 2j and 2j + 1, the last one's
// second word being the flag, and
//   exec.writeLinePiece(line, j, w0, w1)  — the eight store their pieces in one warp-wide
//                                           128-byte store, with no fence;
//   exec.readLinePiece(line, j, flag, &w0, &w1, end) — the eight load theirs in one warp-wide
//                                           load, again until the last thread's flag is
//                                           `flag`; false for all eight once the wait
//                                           must stop (an abort, a broken connection, the
//                                           timeout, as Exec::waitUntil).
// All eight call each together. That a line whose flag arrived arrived whole holds only where
// the path delivers a warp's 128-byte store in one piece: NVLink, or one GPU's own memory
// (NCCL's rule, which the tuner applies: src/comm/comm_tuning.cc). A proxied FIFO does not
// depend on it: its receiver reads the lines after the proxy's tail.
// Payload packing, step sizes, the periodic slot refresh that keeps stale lines from
// passing for current ones, and the step stamps are as described in line_pipeline.h. 120 bytes hold a whole number of
// elements of every type (1, 2, 4 or 8 bytes), so no element straddles two lines. Slots: only whole lines are used. The
// host sizes LL128 slots in whole lines; a slot that is not (NCCL hangs on one) loses its tail instead, and one under a
// line, or not 8-byte aligned, fails the primitive cleanly (ok() false, the error recorded).
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/common/line_pipeline.h"

namespace chorus {

struct LL128Format {
  static constexpr Protocol kProtocol = Protocol::LL128;
  static constexpr size_t kLineBytes = 128;
  static constexpr size_t kLineWords = 16;
  static constexpr size_t kPayloadBytes = 120;
  static constexpr size_t kPayloadWords = 15;
  static constexpr size_t kBlockLines = 16;  // 1920 B of payload staged at a time
  static constexpr int kPieceThreads = 8;    // threads that move a line together, 16 bytes each

  // Lines move one by one: the flag word's release/acquire orders each line.
  static constexpr bool kBlockMoves = false;

  using Flag = uint64_t;
  static CHORUS_HD Flag flagOf(uint64_t step) { return step + 1; }

  // Writes `count` lines from `payload` (count * 120 bytes, 8-byte aligned): 15 word stores
  // and the flag's release store per line, all by the calling thread, so the release need
  // only publish this thread's own stores (Exec::storeReleaseOwn).
  template <typename Exec>
  static CHORUS_HD void writeLines(uint64_t* line, const unsigned char* payload, size_t count, Flag flag) {
    for (size_t i = 0; i < count; ++i) {
      uint64_t* words = line + i * kLineWords;
      const unsigned char* bytes = payload + i * kPayloadBytes;
      copyAlignedWords(words, bytes, kPayloadBytes);
      Exec::storeReleaseOwn(words + kPayloadWords, flag);
    }
  }

  // Writes `count` lines of zero payload (the periodic refresh).
  template <typename Exec>
  static CHORUS_HD void writeEmptyLines(uint64_t* line, size_t count, Flag flag) {
    for (size_t i = 0; i < count; ++i) {
      for (size_t w = 0; w < kPayloadWords; ++w) line[i * kLineWords + w] = 0;
      Exec::storeReleaseOwn(line + i * kLineWords + kPayloadWords, flag);
    }
  }

  // Copies the line's payload to `out` (8-byte aligned) once its flag word is `flag`.
  template <typename Exec>
  static CHORUS_HD bool tryRead(const uint64_t* line, Flag flag, unsigned char* out) {
    if (Exec::loadAcquire(line + kPayloadWords) != flag) return false;
    copyAlignedWords(out, line, kPayloadBytes);
    return true;
  }
};

template <typename T, typename Op, typename Exec>
using LL128Primitives = LinePrimitives<T, Op, Exec, LL128Format>;

}  // namespace chorus
