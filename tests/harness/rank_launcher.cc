#include "harness/rank_launcher.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

namespace chorus_test {
namespace {

using Clock = std::chrono::steady_clock;

// After one rank fails, the others are likely blocked on it: give them this long
// to notice (or finish) before declaring them hung.
constexpr std::chrono::seconds kGraceAfterFailure{20};
constexpr int kMaxProcessRanks = 64;
constexpr size_t kMessageBytes = 4096;

RankOutcome runGuarded(const std::function<RankOutcome()>& body) {
  try {
    return body();
  } catch (const std::exception& error) {
    return RankOutcome::fail(std::string("exception: ") + error.what());
  } catch (...) {
    return RankOutcome::fail("unknown exception");
  }
}

RankOutcome initRunDestroy(int rank, int nranks, const ncclUniqueId& id, const RankBody& body) {
  ncclComm_t comm = nullptr;
  ncclResult_t initResult = ncclCommInitRank(&comm, nranks, id, rank);
  if (initResult != ncclSuccess) {
    return RankOutcome::fail("ncclCommInitRank(nranks=" + std::to_string(nranks) + ", rank=" + std::to_string(rank) +
                             ") returned " + resultName(initResult));
  }
  RankOutcome outcome = runGuarded([&] { return body(RankContext{comm, rank, nranks}); });
  ncclResult_t destroyResult = ncclCommDestroy(comm);
  if (destroyResult != ncclSuccess) {
    outcome.ok = false;
    outcome.message +=
        (outcome.message.empty() ? "" : "; ") + std::string("ncclCommDestroy returned ") + resultName(destroyResult);
  }
  return outcome;
}

// Tracks which of N workers finished, so a waiter can name the ones that did not.
class CompletionBoard {
 public:
  explicit CompletionBoard(int workers) : finished_(workers, false) {}
  void markFinished(int worker) {
    std::lock_guard lock(mutex_);
    finished_[worker] = true;
    changed_.notify_all();
  }
  // Returns the workers still running when `timeout` expired (empty: all done).
  std::vector<int> waitAll(std::chrono::seconds timeout) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, timeout,
                      [&] { return std::all_of(finished_.begin(), finished_.end(), [](bool f) { return f; }); });
    std::vector<int> running;
    for (size_t i = 0; i < finished_.size(); ++i) {
      if (!finished_[i]) running.push_back(static_cast<int>(i));
    }
    return running;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<bool> finished_;
};

// A hung thread cannot be cancelled safely: report it and end the test binary.
[[noreturn]] void exitForHungThreads(const char* what, const std::vector<int>& hungRanks,
                                     std::chrono::seconds timeout) {
  std::string ranks;
  for (int rank : hungRanks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(rank);
  std::fprintf(stderr, "FATAL: %s: rank(s) %s still running after %lld s (hung); exiting the test binary\n", what,
               ranks.c_str(), static_cast<long long>(timeout.count()));
  std::fflush(stderr);
  std::_Exit(3);
}

LaunchResult runThreadRanks(int nranks, const RankBodyWithId& body, std::chrono::seconds timeout) {
  LaunchResult result;
  ncclUniqueId id;
  ncclResult_t idResult = ncclGetUniqueId(&id);
  if (idResult != ncclSuccess) {
    result.ranks.assign(nranks, RankOutcome::fail("ncclGetUniqueId returned " + resultName(idResult)));
    return result;
  }
  result.ranks.resize(nranks);
  CompletionBoard board(nranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < nranks; ++rank) {
    threads.emplace_back([&, rank] {
      result.ranks[rank] = runGuarded([&] { return body(rank, nranks, id); });
      board.markFinished(rank);
    });
  }
  std::vector<int> hung = board.waitAll(timeout);
  if (!hung.empty()) exitForHungThreads("thread ranks", hung, timeout);
  for (std::thread& thread : threads) thread.join();
  return result;
}

// Anonymous shared memory that survives fork: the parent's window into its children.
class SharedMapping {
 public:
  explicit SharedMapping(size_t bytes) : bytes_(bytes) {
    address_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (address_ == MAP_FAILED) throw std::runtime_error(std::string("mmap shared page: ") + std::strerror(errno));
  }
  ~SharedMapping() { munmap(address_, bytes_); }
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  void* address() const { return address_; }

 private:
  void* address_;
  size_t bytes_;
};

enum SlotState : int { kSlotRunning = 0, kSlotPassed = 1, kSlotFailed = 2 };

struct RankSlot {
  std::atomic<int> state;
  char message[kMessageBytes];
};

struct ProcessControlPage {
  std::atomic<int> idState;  // 0 pending, 1 published, -1 ncclGetUniqueId failed
  ncclUniqueId id;
  RankSlot slots[kMaxProcessRanks];
};
static_assert(std::atomic<int>::is_always_lock_free, "atomics in shared memory must be lock-free");

void publishOutcome(RankSlot& slot, const RankOutcome& outcome) {
  std::snprintf(slot.message, sizeof(slot.message), "%s", outcome.message.c_str());
  slot.state.store(outcome.ok ? kSlotPassed : kSlotFailed, std::memory_order_release);
}

// Children that have not been reaped are killed and reaped when this goes out of scope.
class ChildProcesses {
 public:
  ~ChildProcesses() {
    for (pid_t& pid : pids_) {
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  }
  void add(pid_t pid) { pids_.push_back(pid); }
  size_t size() const { return pids_.size(); }
  pid_t pid(size_t index) const { return pids_[index]; }
  void markReaped(size_t index) { pids_[index] = -1; }

 private:
  std::vector<pid_t> pids_;
};

std::string describeExit(int status) {
  if (WIFSIGNALED(status)) {
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return "exit code " + std::to_string(WEXITSTATUS(status));
}

// Waits for every child; fills `outcomes` from the slots or from how the child ended.
void reapChildren(ChildProcesses& children, ProcessControlPage& page, std::chrono::seconds timeout,
                  std::vector<RankOutcome>& outcomes) {
  Clock::time_point deadline = Clock::now() + timeout;
  size_t remaining = children.size();
  std::vector<bool> reaped(children.size(), false);
  while (remaining > 0) {
    for (size_t rank = 0; rank < children.size(); ++rank) {
      if (reaped[rank]) continue;
      int status = 0;
      if (waitpid(children.pid(rank), &status, WNOHANG) != children.pid(rank)) continue;
      reaped[rank] = true;
      children.markReaped(rank);
      --remaining;
      int state = page.slots[rank].state.load(std::memory_order_acquire);
      RankOutcome& outcome = outcomes[rank];
      if (state == kSlotRunning) {
        outcome = RankOutcome::fail("process ended without reporting: " + describeExit(status));
      } else {
        outcome.ok = state == kSlotPassed && WIFEXITED(status) && WEXITSTATUS(status) == 0;
        outcome.message = page.slots[rank].message;
        if (state == kSlotPassed && !outcome.ok)
          outcome.message += " (reported pass, then " + describeExit(status) + ")";
      }
      if (!outcome.ok) deadline = std::min(deadline, Clock::now() + kGraceAfterFailure);
    }
    if (remaining == 0) break;
    if (Clock::now() > deadline) {
      for (size_t rank = 0; rank < children.size(); ++rank) {
        if (reaped[rank]) continue;
        kill(children.pid(rank), SIGKILL);
        waitpid(children.pid(rank), nullptr, 0);
        children.markReaped(rank);
        outcomes[rank] =
            RankOutcome::fail("rank " + std::to_string(rank) + " hung: still running at the deadline (" +
                              std::to_string(timeout.count()) + " s, or " + std::to_string(kGraceAfterFailure.count()) +
                              " s after another rank failed); killed with SIGKILL");
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Child side of process mode: obtain the id, run the body, report, never return.
[[noreturn]] void childRank(ProcessControlPage& page, int rank, int nranks, const RankBodyWithId& body) {
  RankOutcome outcome;
  if (rank == 0) {
    ncclResult_t idResult = ncclGetUniqueId(&page.id);
    page.idState.store(idResult == ncclSuccess ? 1 : -1, std::memory_order_release);
    if (idResult != ncclSuccess) outcome = RankOutcome::fail("ncclGetUniqueId returned " + resultName(idResult));
  } else {
    Clock::time_point idDeadline = Clock::now() + std::chrono::seconds(60);
    while (page.idState.load(std::memory_order_acquire) == 0 && Clock::now() < idDeadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    int idState = page.idState.load(std::memory_order_acquire);
    if (idState != 1) {
      outcome = RankOutcome::fail(idState == 0 ? "rank 0 never published the unique id (60 s)"
                                               : "rank 0 failed to get a unique id");
    }
  }
  if (outcome.ok) {
    ncclUniqueId id = page.id;
    outcome = runGuarded([&] { return body(rank, nranks, id); });
  }
  publishOutcome(page.slots[rank], outcome);
  _exit(outcome.ok ? 0 : 1);
}

LaunchResult runProcessRanks(int nranks, const RankBodyWithId& body, std::chrono::seconds timeout) {
  LaunchResult result;
  if (nranks > kMaxProcessRanks) {
    result.ranks.assign(std::max(nranks, 0), RankOutcome::fail("process launcher supports at most 64 ranks"));
    return result;
  }
  SharedMapping mapping(sizeof(ProcessControlPage));
  auto* page = new (mapping.address()) ProcessControlPage();  // zeroed: idState pending, slots running
  result.ranks.resize(nranks);
  ChildProcesses children;
  std::fflush(stdout);  // a child must not re-emit the parent's buffered output
  std::fflush(stderr);
  for (int rank = 0; rank < nranks; ++rank) {
    pid_t pid = fork();
    if (pid < 0) {
      result.ranks.assign(nranks, RankOutcome::fail(std::string("fork: ") + std::strerror(errno)));
      return result;  // ChildProcesses kills the ones already started
    }
    if (pid == 0) childRank(*page, rank, nranks, body);
    children.add(pid);
  }
  reapChildren(children, *page, timeout, result.ranks);
  return result;
}

}  // namespace

const char* launchModeName(LaunchMode mode) { return mode == LaunchMode::kThreads ? "Threads" : "Processes"; }

bool LaunchResult::allOk() const {
  return !ranks.empty() && std::all_of(ranks.begin(), ranks.end(), [](const RankOutcome& r) { return r.ok; });
}

std::string LaunchResult::describe() const {
  if (ranks.empty()) return "no rank ran";
  std::string text;
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    if (!ranks[rank].ok) text += "rank " + std::to_string(rank) + ": " + ranks[rank].message + "\n";
  }
  return text;
}

LaunchResult runRanksWithId(LaunchMode mode, int nranks, const RankBodyWithId& body, std::chrono::seconds timeout) {
  return mode == LaunchMode::kThreads ? runThreadRanks(nranks, body, timeout) : runProcessRanks(nranks, body, timeout);
}

LaunchResult runRanks(LaunchMode mode, int nranks, const RankBody& body, std::chrono::seconds timeout) {
  return runRanksWithId(
      mode, nranks, [&](int rank, int n, const ncclUniqueId& id) { return initRunDestroy(rank, n, id, body); },
      timeout);
}

LaunchResult runAllRanksOneThread(int nranks, const AllRanksBody& body, std::chrono::seconds timeout) {
  LaunchResult result;
  CompletionBoard board(1);
  std::thread driver([&] {
    std::vector<ncclComm_t> comms(nranks, nullptr);
    ncclResult_t initResult = ncclCommInitAll(comms.data(), nranks, nullptr);
    if (initResult != ncclSuccess) {
      result.ranks.assign(nranks, RankOutcome::fail("ncclCommInitAll(" + std::to_string(nranks) + ", NULL) returned " +
                                                    resultName(initResult)));
    } else {
      std::vector<RankOutcome> outcomes;
      try {
        outcomes = body(comms);
      } catch (const std::exception& error) {
        outcomes.assign(nranks, RankOutcome::fail(std::string("exception: ") + error.what()));
      }
      outcomes.resize(nranks, RankOutcome::fail("body returned too few outcomes"));
      for (int rank = 0; rank < nranks; ++rank) {
        ncclResult_t destroyResult = ncclCommDestroy(comms[rank]);
        if (destroyResult != ncclSuccess) {
          outcomes[rank].ok = false;
          outcomes[rank].message += " ncclCommDestroy returned " + resultName(destroyResult);
        }
      }
      result.ranks = std::move(outcomes);
    }
    board.markFinished(0);
  });
  if (!board.waitAll(timeout).empty()) exitForHungThreads("ncclCommInitAll driver thread", {-1}, timeout);
  driver.join();
  return result;
}

RankOutcome runInChildProcess(const std::function<RankOutcome()>& body, std::chrono::seconds timeout) {
  SharedMapping mapping(sizeof(ProcessControlPage));
  auto* page = new (mapping.address()) ProcessControlPage();
  ChildProcesses children;
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return RankOutcome::fail(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    RankOutcome outcome = runGuarded(body);
    publishOutcome(page->slots[0], outcome);
    _exit(outcome.ok ? 0 : 1);
  }
  children.add(pid);
  std::vector<RankOutcome> outcomes(1);
  reapChildren(children, *page, timeout, outcomes);
  return outcomes[0];
}

std::string resultName(ncclResult_t result) {
  static const char* const kNames[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                       "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                       "ncclRemoteError",   "ncclInProgress"};
  int code = static_cast<int>(result);
  std::string name = (code >= 0 && code < 8) ? kNames[code] : "unknown";
  return name + "(" + std::to_string(code) + ")";
}

}  // namespace chorus_test
