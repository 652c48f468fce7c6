// Buffers for calls that are simulated and never run (ncclGroupSimulateEnd): address space
// reserved without memory (PROT_NONE), so that a call may name gigabytes, with its send and
// receive ranges apart (buffers that overlap other than in place are refused).
#pragma once

#include <cstddef>

namespace chorus_test {

struct UntouchedBuffers {
  static constexpr size_t kEachBytes = size_t(1) << 30;
  char* send = nullptr;  // kEachBytes each, never to be read or written
  char* recv = nullptr;
};

// The process's reservation, made at the first call (forked ranks inherit it).
const UntouchedBuffers& untouchedBuffers();

}  // namespace chorus_test
