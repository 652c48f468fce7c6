#include "harness/untouched_buffers.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>

namespace chorus_test {

const UntouchedBuffers& untouchedBuffers() {
  static const UntouchedBuffers buffers = [] {
    void* base =
        mmap(nullptr, 2 * UntouchedBuffers::kEachBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
      perror("mmap of the untouched buffers");
      abort();
    }
    UntouchedBuffers b;
    b.send = static_cast<char*>(base);
    b.recv = b.send + UntouchedBuffers::kEachBytes;
    return b;
  }();
  return buffers;
}

}  // namespace chorus_test
