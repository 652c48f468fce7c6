// Releasing FIFO pages for ncclCommSuspend (transport.h).
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "core/debug.h"
#include "transport/transport.h"

namespace chorus {

size_t releaseFifoPages(void* base, size_t from, size_t to, bool shared) {
  const size_t page = fifoPageBytes();
  const size_t first = roundUpToFifoPages(from);  // only whole pages: their neighbours stay
  const size_t last = to / page * page;
  if (last <= first) return 0;
  char* start = static_cast<char*>(base) + first;
  if (madvise(start, last - first, shared ? MADV_REMOVE : MADV_DONTNEED) != 0) {
    WARN("ncclCommSuspend: madvise(%p, %zu, %s) failed: %s; the FIFO keeps its memory", static_cast<void*>(start),
         last - first, shared ? "MADV_REMOVE" : "MADV_DONTNEED", strerror(errno));
    return 0;
  }
  return last - first;
}

}  // namespace chorus
