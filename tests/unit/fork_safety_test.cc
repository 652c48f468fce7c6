// What a child made by fork() inherits from a process whose other threads were busy: no
// lock held for ever, and threads of its own where the parent's are not copied.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/debug.h"
#include "tests/harness/child_process.h"
#include "transport/net/proxy.h"

namespace chorus {
namespace {

using chorus_test::ChildProcess;
using namespace std::chrono_literals;

// Every WARN takes the log's lock (the last error is kept under it). Forks while another
// thread WARNs without pause: each child's own WARN must still return.
TEST(ForkSafety, AChildCanLogWhateverAnotherThreadWasLoggingAtTheFork) {
  std::atomic<bool> stop{false};
  std::thread chatty([&] {
    while (!stop.load(std::memory_order_relaxed)) WARN("ForkSafety: a warning from another thread");
  });
  int hung = 0, failed = 0;
  for (int i = 0; i < 200; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      WARN("ForkSafety: the child's warning");
      _exit(0);
    }
    const int status = ChildProcess(pid).exitStatusWithin(5s);
    hung += status < 0;
    failed += status > 0;
    if (hung > 0) break;  // one is proof enough
  }
  stop = true;
  chatty.join();
  EXPECT_EQ(hung, 0) << "children stuck on the log's lock";
  EXPECT_EQ(failed, 0);
}

class CountingConnection : public ProxyConnection {
 public:
  bool progress() override {
    calls.fetch_add(1);
    return false;
  }
  bool waitSet(std::vector<pollfd>*) override { return false; }  // the proxy naps and polls again
  void announceSleep(uint32_t) override {}
  std::atomic<int> calls{0};
};

bool progressedWithin(const CountingConnection& conn, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (conn.calls.load() == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return conn.calls.load() > 0;
}

// The parent's proxy thread runs when it forks; the child's connections are moved by a
// proxy thread of the child's own (fork copies only the forking thread).
TEST(ForkSafety, AForkedChildGetsAProxyThreadOfItsOwn) {
  CountingConnection parents;
  Proxy::instance().add(&parents);
  ASSERT_TRUE(progressedWithin(parents, std::chrono::seconds(5)));
  const pid_t pid = fork();
  if (pid == 0) {
    CountingConnection childs;
    Proxy::instance().add(&childs);
    if (!progressedWithin(childs, std::chrono::seconds(5))) _exit(1);  // no thread moves it
    Proxy::instance().remove(&childs);
    _exit(0);
  }
  EXPECT_EQ(ChildProcess(pid).exitStatusWithin(20s), 0) << "the child's connection was never progressed";
  Proxy::instance().remove(&parents);
}

}  // namespace
}  // namespace chorus
