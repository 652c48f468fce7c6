// The seam between the host runtime and the executors that move a communicator's data.
//
// Rule: the host runtime reaches an executor only through this interface. A group's
// calls are staged first, by each communicator's executor, into one GroupLaunch; then
// GroupLaunch::start launches what runs on its own (GPU kernels) and runs, on the
// calling thread, what needs it (the CPU executor's lanes, every communicator's
// together, so that one thread can drive all the ranks of ncclCommInitAll). Errors of
// asynchronous work surface later, through asyncError.
//
// Which executor a communicator has is executor_choice.h's business: decided when the
// communicator is made, and made at its first call.
#pragma once

#include <cstdint>
#include <vector>

#include "nccl.h"

struct ncclComm;

namespace chorus {

struct CollOp;    // src/enqueue/op.h
struct HostLane;  // device/cpu/lane_runner.h
class GroupLaunch;

class Executor {
 public:
  virtual ~Executor() = default;
  // Plans `ops` (one group's validated calls on `comm`, in call order) and stages them in
  // `group`. Nothing runs yet. Errors come with a WARN.
  virtual ncclResult_t stage(ncclComm* comm, const std::vector<CollOp>& ops, GroupLaunch& group) = 0;
  // Starts what stage() left for asynchronous launch (`go` false: drops it) and returns
  // at once. Called by GroupLaunch::start only.
  virtual ncclResult_t launch(ncclComm* comm, bool go) = 0;
  // The first failure of the work that ran on the calling thread (ncclSuccess if none).
  virtual ncclResult_t runError() const = 0;
  // The first failure recorded by asynchronous work (ncclSuccess if none); the first time
  // it is seen, a WARN names its cause. Safe from any thread.
  virtual ncclResult_t asyncError(ncclComm* comm) = 0;
  // Makes running and future asynchronous work stop waiting. Safe from any thread.
  virtual void abort() = 0;
  // The GPU memory it holds for the communicator, in bytes. Safe from any thread.
  virtual uint64_t gpuMemoryBytes() const = 0;
  // Whether the work it launches has run, on the calling thread, when GroupLaunch::start
  // returns (a profiler's per-channel events span that run), or runs later on a device.
  virtual bool runsOnCallingThread() const = 0;
};

// One group's staged work, over all its communicators and executors.
class GroupLaunch {
 public:
  // `comm`'s executor has work to launch: start() calls executor->launch(comm, go).
  void addLaunch(Executor* executor, ncclComm* comm) { launches_.push_back({executor, comm}); }
  // A lane the calling thread runs to completion; valid until start() returns.
  void addHostLane(const HostLane* lane) { hostLanes_.push_back(lane); }

  // Launches everything staged, in staging order, then runs the host lanes (all of them
  // together) unless a launch failed; `go` false drops everything. Returns the first
  // error; each communicator's own failures are then in its executor's runError().
  ncclResult_t start(bool go);
  // Forgets what was staged, keeping the storage (a warm call allocates nothing).
  void clear();

 private:
  struct Launch {
    Executor* executor;
    ncclComm* comm;
  };
  std::vector<Launch> launches_;
  std::vector<const HostLane*> hostLanes_;
};

}  // namespace chorus
