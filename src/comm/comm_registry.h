// Which communicators are live, and who is inside them.
//
// Rule: a thread touches a communicator's memory only while it holds a CommPin on it (an
// API call, a group's end), and a communicator is freed only after closeComm took it out
// of the registry and waitForCallsToLeave saw every pin go. So an abort or destroy on one
// thread and a call on another, in any order and at the same instant, meet in one of two
// ways: the call pins first and the free waits for it, or the close comes first and the
// call fails as on a destroyed communicator. Nothing reads freed memory.
//
// A pin costs four uncontended atomic adds and no lock while one communicator is in use
// (comm_registry.cc says how it closes the gap between a call's check and its count).
#pragma once

#include <cstdint>
#include <functional>

struct ncclComm;

namespace chorus {

// Live communicators, so that a destroyed handle is recognised rather than used. Each
// communicator registers itself when it is made and unregisters (if still there) when freed.
void registerComm(ncclComm* comm);
void unregisterComm(ncclComm* comm);
// Calls `visit` for every live communicator of the process, under the registry's lock (so
// none is freed meanwhile; `visit` must not create or destroy one).
void forEachLiveComm(const std::function<void(const ncclComm&)>& visit);

// A hold on a live communicator: while it exists the communicator is not freed.
class CommPin {
 public:
  CommPin() = default;
  // Pins `comm` if it is live and, when `serial` is given, still the communicator of that
  // serial (ncclComm::serial: a freed communicator's address may be reused by a new one).
  explicit CommPin(ncclComm* comm, uint64_t serial = 0);
  ~CommPin() { release(); }
  CommPin(CommPin&& other) noexcept : comm_(other.comm_) { other.comm_ = nullptr; }
  CommPin& operator=(CommPin&& other) noexcept;
  CommPin(const CommPin&) = delete;
  CommPin& operator=(const CommPin&) = delete;

  explicit operator bool() const { return comm_ != nullptr; }
  ncclComm* get() const { return comm_; }
  void release();

 private:
  ncclComm* comm_ = nullptr;
};

// The first step of freeing `comm`: takes it out of the registry, so that every later pin
// (and call) fails. False when it is not there (or, given `serial`, is another communicator
// now): another thread closed it first, and that thread frees it.
bool closeComm(ncclComm* comm, uint64_t serial = 0);
// After closeComm: returns once no thread holds a pin on `comm`.
void waitForCallsToLeave(const ncclComm* comm);
// closeComm, waitForCallsToLeave, delete. False (and nothing freed) when already closed.
bool freeComm(ncclComm* comm, uint64_t serial = 0);

}  // namespace chorus
