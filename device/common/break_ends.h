// A failed run tells every peer of its communicator at once: it marks every connection end
// its view holds broken (step_fifo.h's `broken` word, which every wait polls), so a peer
// waiting for it (in another process, on another GPU, or a lane of another communicator
// on the same thread) fails now, not at its timeout. A mismatch of calls is the caller's
// error on every rank (ncclInvalidUsage), and says so.
//
// Exec::markBroken(ctrl, cause) sets the word unless it is set already (the first cause
// stays), visibly to the host and to other devices: each executor's own atomics.
#pragma once

#include "device/common/platform.h"
#include "device/common/step_fifo.h"
#include "device/common/work.h"

namespace chorus {

template <typename Exec>
CHORUS_HD void breakEnd(const FifoEnd* end, BrokenCause cause) {
  if (end != nullptr && end->ctrl != nullptr) Exec::markBroken(end->ctrl, cause);
}

template <typename Exec>
CHORUS_HD void breakEveryEnd(const CommView& view, BrokenCause cause) {
  for (int c = 0; c < view.nChannels; ++c) {
    const ChannelView& ch = view.channels[c];
    breakEnd<Exec>(ch.ringRecv, cause);
    breakEnd<Exec>(ch.ringSend, cause);
    breakEnd<Exec>(ch.tree.sendUp, cause);
    breakEnd<Exec>(ch.tree.recvDown, cause);
    for (int i = 0; i < kMaxPeers; ++i) {
      breakEnd<Exec>(ch.tree.recvUp[i], cause);
      breakEnd<Exec>(ch.tree.sendDown[i], cause);
    }
  }
  for (int p = 0; p < view.nranks; ++p) {
    if (view.p2pSend) breakEnd<Exec>(view.p2pSend[p], cause);
    if (view.p2pRecv) breakEnd<Exec>(view.p2pRecv[p], cause);
    if (view.board) breakEnd<Exec>(view.board[p], cause);  // board.h: every rank's block
  }
}

// The cause a failed run's status names.
CHORUS_HD BrokenCause brokenCauseOf(int failure) {
  return failure == ncclInvalidUsage ? kBrokenByMismatch : kBrokenByPeer;
}

}  // namespace chorus
