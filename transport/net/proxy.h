// The proxy: one progress thread per process that moves FIFO slots between connectors
// and the network (DESIGN.md: the only place that blocks on a network). Executors only
// poll FIFO counters; each proxied connection's progress() turns those counters into
// net requests and completed requests back into counters.
//
// The thread starts with the first connection and stops (joined) when the last one is
// removed, so destroy and abort leave no thread behind. Idle, it yields for 50 µs, then
// sleeps in poll() on what its connections wait for (their sockets) and on its
// doorbell, an eventfd that the executors' publishes ring while it sleeps (announced in
// each FIFO's `proxyAsleep`, step_fifo.h). A sleep lasts at most CHORUS_WAIT_SLEEP_US,
// so a connection marked broken is still noticed. Where a connection cannot say what
// it waits for (while connecting, a net without sockets, a GPU kernel publishing its
// FIFO) the proxy naps 50 µs instead, as it did before it could sleep.
#pragma once

#include <poll.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace chorus {

class ProxyConnection {
 public:
  virtual ~ProxyConnection() = default;
  // Moves whatever can move now without blocking; true when anything did.
  virtual bool progress() = 0;
  // Appends the poll() entries whose readiness would let progress() move something;
  // false when the connection cannot say, and then the proxy must keep polling it.
  virtual bool waitSet(std::vector<pollfd>* fds) = 0;
  // The proxy goes to sleep (`bell`: its doorbell's fd + 1) or is awake (0).
  virtual void announceSleep(uint32_t bell) = 0;
};

// What a profiler sees of the proxy thread itself (NCCL's ProxyCtrl events): its moves
// between working and idle, and each sleep in poll() and its wake-up. Called on the proxy
// thread, never under the proxy's locks' other users (add/remove wait for it).
enum class ProxyCtrlState { Idle, Active, Sleep, Wakeup };
class ProxyCtrlSink {
 public:
  virtual ~ProxyCtrlSink() = default;
  virtual void proxyState(ProxyCtrlState state) = 0;
};

class Proxy {
 public:
  // The process's proxy (never destroyed: its thread may outlive static destructors).
  static Proxy& instance();

  // progress() is called on the proxy thread from now until remove() returns.
  void add(ProxyConnection* conn);
  // After this returns the proxy thread no longer touches `conn`.
  void remove(ProxyConnection* conn);

  // `sink` hears of the thread's states from now until removeCtrlSink() returns (a sleep
  // it heard begin may then never be said to end: the sink closes it itself).
  void addCtrlSink(ProxyCtrlSink* sink);
  void removeCtrlSink(ProxyCtrlSink* sink);

  bool running();                                     // for tests: whether the thread exists
  uint64_t sleeps() const { return sleeps_.load(); }  // for tests: the thread's sleeps in poll() so far

 private:
  Proxy() = default;
  void loop(long sleepMaxUs);
  // Sleeps until a connection can move, the doorbell rings, or `us` passed; false without
  // sleeping when a connection cannot say what it waits for (the caller naps instead).
  bool sleep(long us);
  void tellSinks(ProxyCtrlState state);  // mutex_ held
  void ring();                           // lifecycle_ held

  std::mutex lifecycle_;  // serialises add/remove with starting and joining the thread
  std::mutex mutex_;      // guards conns_ and stop_; held by the thread while it progresses
  std::vector<ProxyConnection*> conns_;
  std::vector<ProxyCtrlSink*> ctrlSinks_;  // guarded by mutex_
  bool stop_ = false;
  std::thread thread_;
  int doorbell_ = -1;            // an eventfd, made with the thread and closed after it is joined
  std::vector<pollfd> waitFds_;  // the thread's
  std::atomic<uint64_t> sleeps_{0};
};

}  // namespace chorus
