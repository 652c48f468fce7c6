// core/fd_handout.h: a descriptor offered by one process reaches the holder of its ticket
// exactly once, and nobody else; junk on the socket does not stop the server; a withdrawn
// offer or a server whose process died is a clear error.
#include "core/fd_handout.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "nccl.h"

namespace chorus {
namespace {

// A memfd holding `text`: what arrives can be told apart from any other descriptor.
int memfdWith(const std::string& text) {
  const int fd = memfd_create("fd-handout-test", MFD_CLOEXEC);
  if (fd >= 0 && pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string contentOf(int fd) {
  char buffer[64] = {};
  const ssize_t n = pread(fd, buffer, sizeof(buffer) - 1, 0);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string();
}

std::string lastError() { return ncclGetLastError(nullptr); }

// Offers a memfd holding `text`; false if that failed.
bool offerText(const std::string& text, FdTicket* ticket) {
  const int fd = memfdWith(text);
  if (fd < 0) return false;
  const bool offered = offerFd(fd, ticket) == ncclSuccess;
  close(fd);  // the offer holds its own duplicate
  return offered;
}

TEST(FdHandout, TheTicketHolderGetsTheDescriptorOnce) {
  FdTicket ticket;
  ASSERT_TRUE(offerText("first offer", &ticket));
  int received = -1;
  ASSERT_EQ(redeemFd(ticket, 3, 5.0, &received), ncclSuccess);
  ASSERT_GE(received, 0);
  EXPECT_EQ(contentOf(received), "first offer");
  close(received);

  EXPECT_EQ(redeemFd(ticket, 3, 5.0, &received), ncclRemoteError) << "an offer is redeemed once";
  EXPECT_EQ(received, -1);
  EXPECT_NE(lastError().find("rank 3 does not offer"), std::string::npos) << lastError();
}

TEST(FdHandout, AWrongOrWithdrawnTicketGetsNothing) {
  FdTicket ticket;
  ASSERT_TRUE(offerText("withdrawn", &ticket));

  FdTicket forged = ticket;
  forged.token[0] ^= 1;
  int received = -1;
  EXPECT_EQ(redeemFd(forged, 1, 5.0, &received), ncclRemoteError) << "a token one bit off";

  withdrawFd(ticket);
  EXPECT_EQ(redeemFd(ticket, 1, 5.0, &received), ncclRemoteError);
  EXPECT_EQ(received, -1);
}

// A client that connects and sends a few bytes, or nothing, is dropped; the next one is served.
TEST(FdHandout, JunkClientsDoNotStopTheServer) {
  FdTicket ticket;
  ASSERT_TRUE(offerText("after the junk", &ticket));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const size_t n = strlen(ticket.socketName);
  memcpy(address.sun_path + 1, ticket.socketName, n);
  const socklen_t length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  for (int i = 0; i < 20; ++i) {
    const int junk = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(junk, 0);
    ASSERT_EQ(connect(junk, reinterpret_cast<const sockaddr*>(&address), length), 0) << strerror(errno);
    if (i % 2 == 0) {
      ASSERT_EQ(send(junk, "abc", 3, MSG_NOSIGNAL), 3);
    }
    close(junk);
  }
  int received = -1;
  ASSERT_EQ(redeemFd(ticket, 2, 5.0, &received), ncclSuccess);
  EXPECT_EQ(contentOf(received), "after the junk");
  close(received);
}

// The offering process died before the ticket was redeemed: its socket is gone.
TEST(FdHandout, AServerWhoseProcessDiedIsAClearError) {
  int pipeFds[2];
  ASSERT_EQ(pipe(pipeFds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    FdTicket ticket{};
    const bool offered = offerText("gone", &ticket);
    const ssize_t written = write(pipeFds[1], &ticket, sizeof(ticket));
    _exit(offered && written == sizeof(ticket) ? 0 : 1);
  }
  close(pipeFds[1]);
  FdTicket ticket{};
  ASSERT_EQ(read(pipeFds[0], &ticket, sizeof(ticket)), static_cast<ssize_t>(sizeof(ticket)));
  close(pipeFds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  int received = -1;
  EXPECT_EQ(redeemFd(ticket, 5, 5.0, &received), ncclRemoteError);
  EXPECT_EQ(received, -1);
  EXPECT_NE(lastError().find("rank 5's descriptor server"), std::string::npos) << lastError();
}

// A server of our own that answers after `delay`, with `status` and (status 1) a memfd.
class SlowServer {
 public:
  SlowServer(std::chrono::milliseconds delay, char status) {
    snprintf(ticket_.socketName, sizeof(ticket_.socketName), "chorus-test-slow-%d", static_cast<int>(getpid()));
    listener_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const size_t n = strlen(ticket_.socketName);
    memcpy(address.sun_path + 1, ticket_.socketName, n);
    const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
    ok_ = bind(listener_, reinterpret_cast<const sockaddr*>(&address), length) == 0 && listen(listener_, 4) == 0;
    thread_ = std::thread([this, delay, status] {
      const int client = accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      char token[sizeof(ticket_.token)];
      if (recv(client, token, sizeof(token), MSG_WAITALL) == static_cast<ssize_t>(sizeof(token))) {
        std::this_thread::sleep_for(delay);
        const int fd = memfdWith("slow");
        sendFdAnswer(client, status, fd);  // a descriptor even with a refusal (status 0)
        close(fd);
      }
      close(client);
    });
  }
  ~SlowServer() {
    shutdown(listener_, SHUT_RDWR);
    thread_.join();
    close(listener_);
  }
  bool ok() const { return ok_; }
  const FdTicket& ticket() const { return ticket_; }

 private:
  FdTicket ticket_{};
  int listener_ = -1;
  bool ok_ = false;
  std::thread thread_;
};

// Signals arrive while a redeem waits (the report signal, the application's own, installed
// without SA_RESTART): the wait goes on and the descriptor arrives.
TEST(FdHandout, SignalsDuringTheWaitDoNotEndIt) {
  struct sigaction quiet {
  }, previous{};
  quiet.sa_handler = [](int) {};
  sigemptyset(&quiet.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR2, &quiet, &previous), 0);
  SlowServer server(std::chrono::milliseconds(300), 1);
  ASSERT_TRUE(server.ok());
  std::atomic<bool> done{false};
  const pthread_t waiter = pthread_self();
  std::thread signaller([&] {
    while (!done.load()) {
      pthread_kill(waiter, SIGUSR2);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  int received = -1;
  const ncclResult_t r = redeemFd(server.ticket(), 4, 5.0, &received);
  done = true;
  signaller.join();
  sigaction(SIGUSR2, &previous, nullptr);
  ASSERT_EQ(r, ncclSuccess) << lastError();
  EXPECT_EQ(contentOf(received), "slow");
  close(received);
}

// A refusal that comes with a descriptor anyway leaves none open in this process.
TEST(FdHandout, ADescriptorWithARefusalIsClosed) {
  SlowServer server(std::chrono::milliseconds(0), 0);
  ASSERT_TRUE(server.ok());
  auto openFds = [] {
    int n = 0;
    for (int fd = 0; fd < 1024; ++fd) n += fcntl(fd, F_GETFD) != -1;
    return n;
  };
  int received = -1;
  const int before = openFds();
  EXPECT_EQ(redeemFd(server.ticket(), 4, 5.0, &received), ncclRemoteError);
  // The server's own memfd is closed by its thread; give it a moment.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(openFds(), before);
}

}  // namespace
}  // namespace chorus
