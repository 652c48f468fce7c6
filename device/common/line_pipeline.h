// The line pipeline that the LL (ll_primitives.h) and LL128 (ll128_primitives.h)
// protocols share: a format's lines carry each step's data and completion together.
//
// LL and LL128 carry each step's completion inside the data, line by line, so a
// receiver can use the first bytes of a step while the rest are still being written,
// and needs no tail counter: the sender only waits on `head` (as Simple does) and
// never touches `tail` or `sizes` — except on a proxied FIFO (step_fifo.h), where the
// sender publishes both and the receiver waits for tail before reading the lines.
//
// Payload of a step (both protocols): the stamp lines (below), then the n * sizeof(T)
// bytes of the elements, packed in order, 8 B per LL line (120 B per LL128 line); data
// line i of the step is line kStampLines + i of slot step % nSlots. A step of B bytes
// occupies max(1, ceil(B / payload)) data lines: the last line is written whole (both
// words, or all 15, zero past the data), and a step of zero elements still writes one
// line. Sizes: a step carries at most ((usable lines - stamp lines) * payload) bytes.
//
// Why a stale line can never pass for a current one. A reader of step s reads only the
// lines of s's size. Each of them was last written at some earlier step s' of the same
// slot (or never: zero). LL128's 64-bit flags differ unless s - s' is a multiple of 2^64;
// LL's 32-bit flags differ unless s - s' is a multiple of 2^32, which a line that a long
// run of shorter steps never reached could reach. So the sender rewrites whole slots
// periodically (NCCL does the same): in each of the nSlots steps just before every step
// whose flag is 0 mod 2^31 (isRefreshStep), it also writes every remaining line of the
// slot with the step's flag and zero payload. Every line is then rewritten at least every
// 2^31 steps, and 0 < s - s' <= 2^31 < 2^32 for anything a reader meets. The same window
// also rewrites, before the one step whose flag is 0 (s = 2^32k - 1 for LL, 2^64 - 1 for
// LL128), lines that were never written since the connection started, provided it started
// at least nSlots steps before that step (every real connection starts at step 0).
//
// Sizes and calls: a step's first lines carry its stamp (call_stamp.h: the call and the
// step's bytes, 32 bytes of payload: 4 LL lines, 1 LL128 line), its data follows. The
// stamp travels in lines like the data, flags and all, so it costs no other cache line
// and no ordering; the receiver reads it before any data line, so a mismatched call or
// count fails the step instead of reading a prefix or waiting for lines that never come.
//
// The pipeline works in blocks of kBlockLines lines through on-stack staging buffers:
// unpack a block of each receive end, reduce it with the user's source, copy it to the
// user's destination, pack it into every send end; so a forwarding rank starts sending a
// step before it has received all of it. Values are pipeline values exactly as in Simple
// (simple_primitives.h), with the same reduction order, so every protocol gives the same
// bits.
//
// A team (team_ops.h) of more than one thread deals the lines out instead: thread t
// moves lines t, t + N, ... one at a time, with no staging beyond the line itself, as
// NCCL's LL does on a GPU; or, for a format and executor that move a line by a group of
// threads (lineThreads, ll128_primitives.h), group g moves lines g, g + N / G, ..., each
// thread its piece. Thread 0 alone waits for free send slots (before any line is
// written) and advances the counters once every thread is done with the step.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/common/platform.h"
#include "device/common/reduce_ops.h"
#include "device/common/step_fifo.h"
#include "device/common/step_stamps.h"
#include "device/common/team_ops.h"

namespace chorus {

// The lines a step's stamp takes before its data (see above): 32 bytes of payload.
constexpr size_t kLineStampBytes = 32;
CHORUS_HD constexpr size_t lineStampLines(Protocol p) { return p == Protocol::LL ? kLineStampBytes / 8 : 1; }

// Payload bytes one step of the line format `Format` carries in `e`'s slots: the whole
// lines past those of the step's stamp.
template <typename Format>
CHORUS_HD size_t linePayloadBytes(const FifoEnd& e) {
  const size_t lines = e.slotBytes[static_cast<int>(Format::kProtocol)] / Format::kLineBytes;
  constexpr size_t kStamp = lineStampLines(Format::kProtocol);
  return lines > kStamp ? (lines - kStamp) * Format::kPayloadBytes : 0;
}

// True for the nSlots steps just before each step whose flag is 0 mod 2^31 (see above).
CHORUS_HD bool isRefreshStep(uint64_t step, int nSlots) {
  const uint64_t window = static_cast<uint64_t>(nSlots);
  return ((step + 1 + window) & ((uint64_t{1} << 31) - 1)) < window;
}

// Threads of `Exec` that move one line of `Format` together: Exec::kLineThreads where the
// format has pieces for them (Format::kPieceThreads) and the executor declares it, else 1.
template <typename Exec, typename Format>
CHORUS_HD constexpr int lineThreads() {
  if constexpr (
      requires { Exec::kLineThreads; } && requires { Format::kPieceThreads; }) {
    static_assert(Exec::kLineThreads == 1 || Exec::kLineThreads == Format::kPieceThreads);
    return Exec::kLineThreads;
  } else {
    return 1;
  }
}

// The line pipeline over a line format (LLFormat, LL128Format); the interface and
// semantics are SimplePrimitives'.
template <typename T, typename Op, typename Exec, typename Format>
class LinePrimitives {
 public:
  static constexpr Protocol kProtocol = Format::kProtocol;
  static constexpr bool kTeamOfOne = Exec::kTeamOfOne;

  // `offered` is SimplePrimitives' (a buffer offered to a sender); lines never move in place.
  CHORUS_HD LinePrimitives(Exec& exec, PeerSet recv, PeerSet send, const Op& op, const CallStamp& call = {},
                           T* /*offered*/ = nullptr)
      : exec_(exec), recv_(recv), send_(send), op_(op), call_(call) {
    for (int i = 0; i < recv_.count && ok_; ++i) checkSlot(*recv_.ends[i]);
    for (int i = 0; i < send_.count && ok_; ++i) checkSlot(*send_.ends[i]);
    if (exec_.tid() == 0) enterCall<Exec>(recv_, send_, call_);
  }
  CHORUS_HD ~LinePrimitives() {
    if (exec_.tid() == 0) leaveCall<Exec>(recv_, send_, call_);
  }
  LinePrimitives(const LinePrimitives&) = delete;
  LinePrimitives& operator=(const LinePrimitives&) = delete;

  // Elements one step can carry: the smallest slot's payload among the connections.
  CHORUS_HD size_t maxStepElems() const {
    size_t bytes = SIZE_MAX;
    for (int i = 0; i < recv_.count; ++i) bytes = minBytes(bytes, capacityBytes(*recv_.ends[i]));
    for (int i = 0; i < send_.count; ++i) bytes = minBytes(bytes, capacityBytes(*send_.ends[i]));
    return bytes / sizeof(T);
  }

  // False once a wait was interrupted (abort, timeout, dead peer) or a slot or step was unusable.
  CHORUS_HD bool ok() const { return ok_; }

  // SimplePrimitives' in-place Send/Recv; lines always go through the slots.
  CHORUS_HD void beginP2p(size_t) {}

  // dst = post(pre(src)): a communicator of one rank, no connection involved.
  CHORUS_HD_OUTLINE void selfCopy(const T* src, T* dst, size_t n) { teamCopy(exec_, dst, src, n, op_, true, true); }

  // dst = post?(pre?(a) (+) pre?(b)): values this rank holds, no connection involved.
  CHORUS_HD_OUTLINE void localReduce(T* dst, const T* a, const T* b, size_t n, bool preA, bool preB, bool post) {
    teamReduce(exec_, dst, a, b, n, op_, preA, preB, post);
  }

  // out = pre?(src)
  CHORUS_HD_OUTLINE void send(const T* src, size_t n, bool pre) {
    runStep<kFromSrc | kToSend>(src, nullptr, n, pre, false, false);
  }

  // dst = src; out = src
  CHORUS_HD_OUTLINE void copySend(const T* src, T* dst, size_t n) {
    if (dst == src) {
      runStep<kFromSrc | kToSend>(src, nullptr, n, false, false, false);
    } else {
      runStep<kFromSrc | kToDst | kToSend>(src, dst, n, false, false, false);
    }
  }

  // dst = post?(in)
  CHORUS_HD_OUTLINE void recv(T* dst, size_t n, bool post) {
    runStep<kFromRecv | kToDst>(nullptr, dst, n, false, false, post);
  }

  // out = in... (+) pre(src)
  CHORUS_HD_OUTLINE void recvReduceSend(const T* src, size_t n) {
    runStep<kFromRecv | kReduceSrc | kToSend>(src, nullptr, n, false, false, false);
  }

  // dst = post(in... (+) pre(src))
  CHORUS_HD_OUTLINE void recvReduceCopy(const T* src, T* dst, size_t n) {
    runStep<kFromRecv | kReduceSrc | kToDst>(src, dst, n, false, true, false);
  }

  // dst = out = post(in... (+) pre(src))
  CHORUS_HD_OUTLINE void recvReduceCopySend(const T* src, T* dst, size_t n) {
    runStep<kFromRecv | kReduceSrc | kToDst | kToSend>(src, dst, n, false, true, false);
  }

  // dst = out = in
  CHORUS_HD_OUTLINE void recvCopySend(T* dst, size_t n) {
    runStep<kFromRecv | kToDst | kToSend>(nullptr, dst, n, false, false, false);
  }

  // out = in
  CHORUS_HD_OUTLINE void recvSend(size_t n) { runStep<kFromRecv | kToSend>(nullptr, nullptr, n, false, false, false); }

 private:
  // What a step does, as bits: where its values come from and where they go.
  static constexpr unsigned kFromRecv = 1;   // the first receive end's data (others drained)
  static constexpr unsigned kReduceSrc = 2;  // ...reduced with pre(src) and every other receive end
  static constexpr unsigned kFromSrc = 4;    // pre?(src), no receive end
  static constexpr unsigned kToDst = 8;
  static constexpr unsigned kToSend = 16;

  // Lines staged and moved together by one thread; threads moving one line together.
  static constexpr size_t kBlockLines = Exec::kTeamOfOne ? Format::kBlockLines : 1;
  static constexpr int kLineThreads = lineThreads<Exec, Format>();
  static constexpr size_t kBlockBytes = kBlockLines * Format::kPayloadBytes;
  static_assert(kBlockBytes % sizeof(T) == 0 && Format::kPayloadBytes % sizeof(T) == 0,
                "elements must not straddle lines or blocks");
  static constexpr size_t kBlockElems = kBlockBytes / sizeof(T);

  static CHORUS_HD size_t minBytes(size_t a, size_t b) { return a < b ? a : b; }
  static CHORUS_HD size_t slotLines(const FifoEnd& e) {
    return e.slotBytes[static_cast<int>(kProtocol)] / Format::kLineBytes;
  }
  // A step's first lines carry its stamp (see the header comment), the data follows.
  struct LineStamp {
    int64_t bytes;
    CallStamp call;
  };
  static constexpr size_t kStampLines = lineStampLines(kProtocol);
  static_assert(sizeof(LineStamp) == kLineStampBytes && kStampLines * Format::kPayloadBytes >= kLineStampBytes);
  static CHORUS_HD size_t capacityBytes(const FifoEnd& e) { return linePayloadBytes<Format>(e); }
  static CHORUS_HD size_t linesFor(size_t bytes) {
    const size_t lines = (bytes + Format::kPayloadBytes - 1) / Format::kPayloadBytes;
    return lines > 0 ? lines : 1;
  }
  static CHORUS_HD uint64_t* lineAt(const FifoEnd& e, size_t line) {
    return reinterpret_cast<uint64_t*>(e.slot(kProtocol, e.step) + line * Format::kLineBytes);
  }

  // A slot must hold a line and keep the 8-byte words aligned; only whole lines of it are
  // used (a slot that is not a multiple of the line loses its tail instead of hanging).
  // Lines moved by groups of threads are 16-byte accesses: their slots must be 16-byte aligned.
  CHORUS_HD void checkSlot(const FifoEnd& e) {
    constexpr size_t kAlign = kLineThreads > 1 ? 16 : 8;
    const int p = static_cast<int>(kProtocol);
    const size_t bytes = e.slotBytes[p];
    const bool aligned =
        bytes % 8 == 0 && reinterpret_cast<uintptr_t>(e.buffs[p]) % kAlign == 0 && e.slotStride[p] % kAlign == 0;
    if (bytes < (kStampLines + 1) * Format::kLineBytes || !aligned) {
      exec_.fail(e,
                 kProtocol == Protocol::LL ? "LL slot unusable (under five 16-byte lines or not 8-byte aligned)"
                 : kLineThreads > 1        ? "LL128 slot unusable (under two 128-byte lines or not 16-byte aligned)"
                                           : "LL128 slot unusable (under two 128-byte lines or not 8-byte aligned)",
                 static_cast<long>(bytes), static_cast<long>((kStampLines + 1) * Format::kLineBytes));
      ok_ = false;
    }
  }

  // A step larger than a slot would overrun the buffer: refused (the algorithms never ask).
  CHORUS_HD bool fits(size_t bytes) {
    const size_t capacity = maxStepElems() * sizeof(T);
    if (bytes <= capacity) return true;
    const FifoEnd& e = recv_.count > 0 ? *recv_.ends[0] : *send_.ends[0];
    exec_.fail(e, "step larger than the slot", static_cast<long>(bytes), static_cast<long>(capacity));
    ok_ = false;
    return false;
  }

  template <unsigned Flow>
  CHORUS_HD_OUTLINE void runStep(const T* src, T* dst, size_t n, bool pre, bool postReduce, bool postDst) {
    constexpr bool kRecv = (Flow & kFromRecv) != 0;
    constexpr bool kSend = (Flow & kToSend) != 0;
    if (!ok_ || !fits(n * sizeof(T))) return;
    const size_t totalBytes = n * sizeof(T);
    const size_t totalLines = linesFor(totalBytes);
    if (exec_.tid() == 0) {
      if constexpr (kRecv) checkStamps(totalBytes, totalLines);
      if constexpr (kSend) {
        if (acquireSendSlots()) sendStamps(totalBytes);
      }
    }
    ok_ = exec_.teamAll(ok_);
    if (!ok_) return;

    if constexpr (kLineThreads > 1) {
      moveLinesByGroups<Flow>(src, dst, totalBytes, totalLines, pre, postReduce, postDst);
    } else {
      moveLinesByThreads<Flow>(src, dst, totalBytes, totalLines, pre, postReduce, postDst);
    }

    // Every thread is done with the step's lines before thread 0 moves the counters on.
    ok_ = exec_.teamAll(ok_);
    if (!ok_) return;
    if (exec_.tid() == 0) {
      if constexpr (kSend) finishSend(totalLines);
      if constexpr (kRecv) {
        for (int i = 0; i < recv_.count; ++i) {
          FifoEnd& r = *recv_.ends[i];
          publishCounter<Exec>(r, &r.ctrl->head, ++r.step);
        }
      }
    }
    exec_.teamSync();
  }

  // The values of `m` elements from element e0 of the step, in `acc`: the first receive
  // end's (`receive(i, out)` fills `out` from receive end i; false once its wait failed)
  // reduced in Simple's order with pre(src) and the other ends', post() on the last
  // reduction; or pre?(src). Then copied to dst where the step says so.
  template <unsigned Flow, typename Receive>
  CHORUS_HD bool stageValues(Receive&& receive, unsigned char* acc, unsigned char* more, const T* src, T* dst,
                             size_t e0, size_t m, bool pre, bool postReduce, bool postDst) {
    T* values = reinterpret_cast<T*>(acc);
    if constexpr ((Flow & kFromRecv) != 0) {
      if (!receive(0, acc)) return false;
      constexpr bool kReduce = (Flow & kReduceSrc) != 0;
      if constexpr (kReduce)
        reduceArrays(values, values, src + e0, m, op_, false, true, postReduce && recv_.count == 1);
      for (int i = 1; i < recv_.count; ++i) {
        if (!receive(i, more)) return false;
        if constexpr (kReduce)
          reduceArrays(values, values, reinterpret_cast<const T*>(more), m, op_, false, false,
                       postReduce && i == recv_.count - 1);
      }
    } else {
      copyArray(values, src + e0, m, op_, pre, false);
    }
    if constexpr ((Flow & kToDst) != 0) copyArray(dst + e0, values, m, op_, false, postDst);
    return true;
  }

  // A step's lines by single threads: blocks of kBlockLines lines staged on the stack (a
  // team of one), or one line per thread.
  template <unsigned Flow>
  CHORUS_HD void moveLinesByThreads(const T* src, T* dst, size_t totalBytes, size_t totalLines, bool pre,
                                    bool postReduce, bool postDst) {
    alignas(16) unsigned char acc[kBlockBytes];
    alignas(16) unsigned char more[(Flow & kFromRecv) != 0 ? kBlockBytes : 1];
    const size_t stride = static_cast<size_t>(exec_.nthreads()) * kBlockLines;
    for (size_t line0 = static_cast<size_t>(exec_.tid()) * kBlockLines; line0 < totalLines; line0 += stride) {
      const size_t lines = totalLines - line0 < kBlockLines ? totalLines - line0 : kBlockLines;
      const size_t byte0 = line0 * Format::kPayloadBytes;
      const size_t bytes = minBytes(totalBytes - byte0, lines * Format::kPayloadBytes);
      auto receive = [&](int i, unsigned char* out) {
        return receiveLines(*recv_.ends[i], kStampLines + line0, lines, out);
      };
      if (!stageValues<Flow>(receive, acc, more, src, dst, byte0 / sizeof(T), bytes / sizeof(T), pre, postReduce,
                             postDst))
        break;
      if constexpr ((Flow & kToSend) != 0) {
        for (size_t b = bytes; b < lines * Format::kPayloadBytes; ++b) acc[b] = 0;  // the last line's padding
        for (int i = 0; i < send_.count; ++i) {
          const FifoEnd& s = *send_.ends[i];
          if constexpr (Format::kBlockMoves && kBlockLines > 1) {
            alignas(16) uint64_t words[kBlockLines * Format::kLineWords];
            Format::packLines(words, acc, lines, Format::flagOf(s.step));
            Exec::storeWords(lineAt(s, kStampLines + line0), words, lines * Format::kLineWords);
          } else {
            Format::template writeLines<Exec>(lineAt(s, kStampLines + line0), acc, lines, Format::flagOf(s.step));
          }
        }
      }
    }
  }

  // A step's lines by groups of kLineThreads threads (ll128_primitives.h): thread j of a
  // group holds the line's words 2j and 2j + 1 in registers, the last thread's second word
  // being the flag; the group receives, reduces and sends its pieces together.
  template <unsigned Flow>
  CHORUS_HD void moveLinesByGroups(const T* src, T* dst, size_t totalBytes, size_t totalLines, bool pre,
                                   bool postReduce, bool postDst) {
    constexpr int kLast = kLineThreads - 1;
    const int piece = exec_.tid() % kLineThreads;
    const size_t groups = static_cast<size_t>(exec_.nthreads() / kLineThreads);
    const size_t pieceAt = static_cast<size_t>(piece) * 2 * sizeof(uint64_t);  // in the line's payload
    const size_t pieceCap = piece == kLast ? sizeof(uint64_t) : 2 * sizeof(uint64_t);
    for (size_t line = static_cast<size_t>(exec_.tid() / kLineThreads); line < totalLines; line += groups) {
      const size_t byte0 = line * Format::kPayloadBytes + pieceAt;
      const size_t bytes = byte0 < totalBytes ? minBytes(pieceCap, totalBytes - byte0) : 0;
      alignas(16) uint64_t acc[2] = {0, 0};
      alignas(16) uint64_t more[2];
      auto receive = [&](int i, unsigned char* out) {
        const FifoEnd& r = *recv_.ends[i];
        uint64_t* words = reinterpret_cast<uint64_t*>(out);
        ok_ =
            exec_.readLinePiece(lineAt(r, kStampLines + line), piece, Format::flagOf(r.step), &words[0], &words[1], r);
        return ok_;
      };
      if (!stageValues<Flow>(receive, reinterpret_cast<unsigned char*>(acc), reinterpret_cast<unsigned char*>(more),
                             src, dst, bytes > 0 ? byte0 / sizeof(T) : 0, bytes / sizeof(T), pre, postReduce, postDst))
        break;
      if constexpr ((Flow & kToSend) != 0) {
        unsigned char* payload = reinterpret_cast<unsigned char*>(acc);
        for (size_t b = bytes; b < pieceCap; ++b) payload[b] = 0;  // past the data, on the step's last line
        for (int i = 0; i < send_.count; ++i) {
          const FifoEnd& s = *send_.ends[i];
          exec_.writeLinePiece(lineAt(s, kStampLines + line), piece, acc[0],
                               piece == kLast ? Format::flagOf(s.step) : acc[1]);
        }
      }
    }
  }

  // Waits for `lines` lines of the end's current step from line `line0`, unpacking their payload.
  // The block's last line is awaited first: a CPU receiver that polled line by line behind
  // its sender would pull each cache line across while the sender is still filling it;
  // once the last line is there the others normally are too, and are read in one sweep.
  // (Every line's flags are still checked, so no store ordering is assumed.)
  CHORUS_HD bool receiveLines(const FifoEnd& end, size_t line0, size_t lines, unsigned char* out) {
    const uint64_t* base = lineAt(end, line0);
    const typename Format::Flag flag = Format::flagOf(end.step);
    auto receiveLine = [&](size_t i) {
      const uint64_t* line = base + i * Format::kLineWords;
      unsigned char* payload = out + i * Format::kPayloadBytes;
      if (Format::template tryRead<Exec>(line, flag, payload)) return true;
      ok_ = exec_.waitUntil([line, flag, payload] { return Format::template tryRead<Exec>(line, flag, payload); }, end);
      return ok_;
    };
    if (!receiveLine(lines - 1)) return false;
    if constexpr (Format::kBlockMoves && kBlockLines > 1) {
      alignas(16) uint64_t words[kBlockLines * Format::kLineWords];
      Exec::loadWords(base, words, (lines - 1) * Format::kLineWords);
      if (Format::unpackLines(words, lines - 1, flag, out)) return true;
    }
    for (size_t i = 0; i + 1 < lines; ++i) {
      if (!receiveLine(i)) return false;
    }
    return true;
  }

  // Every receive end's step must belong to this call, with the bytes this rank expects,
  // before its data is used: its stamp lines are read (and waited for) like data lines. A
  // proxied end's step is there only once its proxy has published tail (see step_fifo.h),
  // and must be as long as this rank expects. Thread 0 only.
  CHORUS_HD bool checkStamps(size_t bytes, size_t lines) {
    for (int i = 0; i < recv_.count && ok_; ++i) {
      const FifoEnd& r = *recv_.ends[i];
      if (r.proxied && !(ok_ = awaitStep(exec_, r))) break;
      const int64_t wire = r.proxied ? r.ctrl->sizes[r.step & static_cast<uint64_t>(r.nSlots - 1)] : 0;
      if (r.proxied && wire < static_cast<int64_t>(kStampLines * Format::kLineBytes)) {
        exec_.fail(r, "malformed step (shorter than its stamp)", static_cast<long>(wire),
                   static_cast<long>((kStampLines + lines) * Format::kLineBytes));
        ok_ = false;
        break;
      }
      alignas(8) unsigned char payload[kStampLines * Format::kPayloadBytes];
      if (!receiveLines(r, 0, kStampLines, payload)) break;
      LineStamp got;
      __builtin_memcpy(&got, payload, sizeof(got));
      if (!stampsMatch(got.call, call_)) {
        exec_.mismatch(r, got.call, call_, "its step belongs to another call");
        ok_ = false;
      } else if (got.bytes != static_cast<int64_t>(bytes)) {
        exec_.fail(r, "step size mismatch (send and receive counts differ)", static_cast<long>(got.bytes),
                   static_cast<long>(bytes));
        ok_ = false;
      } else if (r.proxied && wire != static_cast<int64_t>((kStampLines + lines) * Format::kLineBytes)) {
        exec_.fail(r, "malformed step (its length does not match its stamp)", static_cast<long>(wire),
                   static_cast<long>((kStampLines + lines) * Format::kLineBytes));
        ok_ = false;
      }
    }
    return ok_;
  }

  // Every send end's step starts with its stamp lines. Thread 0 only.
  CHORUS_HD void sendStamps(size_t bytes) {
    alignas(8) unsigned char payload[kStampLines * Format::kPayloadBytes] = {};
    const LineStamp stamp{static_cast<int64_t>(bytes), call_};
    __builtin_memcpy(payload, &stamp, sizeof(stamp));
    for (int i = 0; i < send_.count; ++i) {
      const FifoEnd& s = *send_.ends[i];
      Format::template writeLines<Exec>(lineAt(s, 0), payload, kStampLines, Format::flagOf(s.step));
    }
  }

  // Waits until every send end's slot for its current step has been released by its
  // receiver. Thread 0 only.
  CHORUS_HD bool acquireSendSlots() {
    for (int i = 0; i < send_.count && ok_; ++i) ok_ = acquireSlot(exec_, *send_.ends[i]);
    return ok_;
  }

  // Refreshes the rest of the slot where due (see the header comment), then moves on.
  // Thread 0 only.
  CHORUS_HD void finishSend(size_t linesWritten) {
    for (int i = 0; i < send_.count; ++i) {
      FifoEnd& s = *send_.ends[i];
      const size_t total = slotLines(s);
      const size_t used = kStampLines + linesWritten;
      if (isRefreshStep(s.step, s.nSlots) && total > used) {
        Format::template writeEmptyLines<Exec>(lineAt(s, used), total - used, Format::flagOf(s.step));
      }
      if (s.proxied) {  // the proxy sends the lines written, stamp lines included, once tail says so
        s.ctrl->sizes[s.step & static_cast<uint64_t>(s.nSlots - 1)] = static_cast<int64_t>(used * Format::kLineBytes);
        Exec::storeRelease(&s.ctrl->tail, s.step + 1);
      } else {  // no one waits for it: it tells a long wait that the step was sent (callConflict)
        Exec::storeRelaxed(&s.ctrl->tail, s.step + 1);
      }
      Exec::wakeSleepers(s, &s.ctrl->tail);  // a long wait for these lines may sleep on tail
      ++s.step;
    }
  }

  Exec& exec_;
  PeerSet recv_;
  PeerSet send_;
  Op op_;
  CallStamp call_;
  bool ok_ = true;
};

}  // namespace chorus
