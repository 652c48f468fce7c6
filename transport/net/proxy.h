// The proxy: one progress thread per process that moves FIFO slots between connectors
// and the network (DESIGN.md: the only place that blocks on a network). Executors only
// poll FIFO counters; each proxied connection's progress() turns those counters into
// net requests and completed requests back into counters.
//
// The thread starts with the first connection and stops (joined) when the last one is
// removed, so destroy and abort leave no thread behind. It spins briefly when idle, then
// yields, then naps: on a 2-core machine an idle proxy must not take a rank's core.
#pragma once

#include <mutex>
#include <thread>
#include <vector>

namespace chorus {

class ProxyConnection {
 public:
  virtual ~ProxyConnection() = default;
  // Moves whatever can move now without blocking; true when anything did.
  virtual bool progress() = 0;
};

class Proxy {
 public:
  // The process's proxy (never destroyed: its thread may outlive static destructors).
  static Proxy& instance();

  // progress() is called on the proxy thread from now until remove() returns.
  void add(ProxyConnection* conn);
  // After this returns the proxy thread no longer touches `conn`.
  void remove(ProxyConnection* conn);

  bool running();  // for tests: whether the thread exists

 private:
  Proxy() = default;
  void loop();

  std::mutex lifecycle_;  // serialises add/remove with starting and joining the thread
  std::mutex mutex_;      // guards conns_ and stop_; held by the thread while it progresses
  std::vector<ProxyConnection*> conns_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace chorus
