// The CUDA runtime's per-thread state that the executor's host side changes for a while
// and puts back: the current device, and the stream-capture mode.
#pragma once

#include <cuda_runtime.h>

namespace chorus {

// Runs on `device` until the scope ends, then restores the caller's device.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    cudaGetDevice(&previous_);
    if (previous_ != device) changed_ = cudaSetDevice(device) == cudaSuccess;
  }
  ~DeviceScope() {
    if (changed_) cudaSetDevice(previous_);  // the caller's context stays untouched otherwise
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

// Allocations and copies made while the user's stream is being captured must not join
// the graph nor be refused by the capture: relaxed mode for this thread, as NCCL does.
class RelaxedCapture {
 public:
  RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace chorus
