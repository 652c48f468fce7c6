// The reduction ops made by ncclRedOpCreatePreMulSum on one communicator, by index
// (ncclRedOp_t value - ncclNumOps). Guarded by a lock: the calling thread creates and
// destroys ops while a non-blocking communicator's worker looks them up for calls it runs.
#pragma once

#include <mutex>
#include <vector>

#include "nccl.h"

namespace chorus {

// A reduction op made by ncclRedOpCreatePreMulSum.
struct UserRedOp {
  ncclDataType_t dtype = ncclFloat32;
  ncclScalarResidence_t residence = ncclScalarHostImmediate;
  uint64_t scalarBits = 0;          // HostImmediate: the value, in dtype
  const void* scalarPtr = nullptr;  // Device: read when the collective runs
};

class UserRedOpTable {
 public:
  // The lowest free index.
  int add(const UserRedOp& op) {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t index = 0;
    while (index < slots_.size() && slots_[index].inUse) ++index;
    if (index == slots_.size()) slots_.emplace_back();
    slots_[index] = Slot{true, op};
    return static_cast<int>(index);
  }
  // False when no op lives at `index`.
  bool remove(int index) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!live(index)) return false;
    slots_[index].inUse = false;
    return true;
  }
  // A copy of the op at `index`; false when none lives there.
  bool find(int index, UserRedOp* out) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!live(index)) return false;
    if (out != nullptr) *out = slots_[index].op;
    return true;
  }

 private:
  struct Slot {
    bool inUse = false;
    UserRedOp op;
  };
  bool live(int index) const { return index >= 0 && index < static_cast<int>(slots_.size()) && slots_[index].inUse; }

  mutable std::mutex mutex_;
  std::vector<Slot> slots_;
};

}  // namespace chorus
