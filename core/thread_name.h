// Names a thread Chorus starts, as NCCL does with NCCL_SET_THREAD_NAME=1 (off by default):
// "NCCL Proxy", "NCCL Root", ... show in top, gdb and perf.
#pragma once

namespace chorus {

// Names the calling thread (at most 15 characters are kept) when NCCL_SET_THREAD_NAME is true.
void nameThisThread(const char* name);

}  // namespace chorus
