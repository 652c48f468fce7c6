// Tree AllReduce of one channel, written once for both executors: reduce up the
// tree, then broadcast down, each phase pipelined in steps.
//
// A rank finishes its whole reduce phase before it starts broadcasting, and the
// root reduces everything before it sends anything down: so no rank ever waits on
// a down step while its up steps are still queued, and the bounded FIFOs cannot
// deadlock (NCCL's non-split tree does the same).
#pragma once

#include <cstddef>

#include "device/common/platform.h"
#include "device/common/ring_algorithms.h"

namespace chorus {

// `up` receives from the children and sends to the parent; `down` receives from the
// parent and sends to the children. A root has no parent, a leaf no children.
template <typename Prims, typename T>
CHORUS_HD_OUTLINE void treeAllReduce(Prims& up, Prims& down, bool hasParent, bool hasChildren, const T* sendbuff,
                                     T* recvbuff, ChannelRange range) {
  const T* src = sendbuff + range.offset;
  T* dst = recvbuff + range.offset;
  if (!hasParent && !hasChildren) {
    up.selfCopy(src, dst, range.count);
    return;
  }
  const size_t upStep = up.maxStepElems();
  const size_t downStep = down.maxStepElems();
  const size_t stepElems = upStep < downStep ? upStep : downStep;
  for (size_t off = 0; off < range.count && up.ok(); off += stepElems) {
    const size_t n = minSize(stepElems, range.count - off);
    if (!hasParent) {
      up.recvReduceCopy(src + off, dst + off, n);  // the root holds the final value
    } else if (!hasChildren) {
      up.send(src + off, n, true);
    } else {
      up.recvReduceSend(src + off, n);
    }
  }
  if (!up.ok()) return;
  for (size_t off = 0; off < range.count && down.ok(); off += stepElems) {
    const size_t n = minSize(stepElems, range.count - off);
    if (!hasParent) {
      down.send(dst + off, n, false);
    } else if (!hasChildren) {
      down.recv(dst + off, n, false);
    } else {
      down.recvCopySend(dst + off, n);
    }
  }
}

}  // namespace chorus
