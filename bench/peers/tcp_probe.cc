// Raw TCP throughput over loopback between two processes, the physical reference for
// Chorus' NET transport (a 2-rank ring AllReduce sends and receives at once, so its
// busbw is bounded by what each direction of a bidirectional TCP stream reaches).
// For every size: both processes send `size` bytes to each other at once, in 4 MiB
// writes, one socket each way, TCP_NODELAY; time per exchange = the slower side. GB/s =
// size / time (per direction). The received bytes are checked.
//   tcp_probe -b 64K -e 256M -f 2 -n 5 -w 2
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "peer_common.h"

namespace {

constexpr size_t kWrite = 4u << 20;

bool sendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t k = send(fd, p, std::min(n, kWrite), MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool recvAll(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t k = recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// One side's exchange: sends and receives `bytes` at once (a thread each).
bool exchange(int fd, const char* out, char* in, size_t bytes) {
  bool sent = true;
  std::thread sender([&] { sent = sendAll(fd, out, bytes); });
  bool received = recvAll(fd, in, bytes);
  sender.join();
  return sent && received;
}

int connectedPair(int* parentFd, int* childFd) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listener, 1) != 0 || getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("tcp_probe: listen");
    return 1;
  }
  *childFd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(*childFd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::perror("tcp_probe: connect");
    return 1;
  }
  *parentFd = accept(listener, nullptr, nullptr);
  close(listener);
  int one = 1;
  setsockopt(*parentFd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(*childFd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return *parentFd < 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  bench::PeerOptions options;
  if (int code = bench::parsePeerOptions(argc, argv, &options, false); code != 0) return code < 0 ? 0 : code;
  int parentFd = -1, childFd = -1;
  if (connectedPair(&parentFd, &childFd) != 0) return 1;
  bench::HostBuffer<char> out = bench::allocateHost<char>(options.maxBytes);
  bench::HostBuffer<char> in = bench::allocateHost<char>(options.maxBytes);
  const std::vector<size_t> sizes = bench::sweepSizes(options);
  const int rounds = options.warmupIters + options.iters;

  pid_t child = fork();
  if (child == 0) {  // the peer: the same exchanges, untimed, with its own pattern
    close(parentFd);
    std::memset(out.get(), 0x3c, options.maxBytes);
    for (size_t bytes : sizes)
      for (int i = 0; i < rounds; ++i)
        if (!exchange(childFd, out.get(), in.get(), bytes)) _exit(1);
    _exit(0);
  }
  close(childFd);
  std::memset(out.get(), 0x5a, options.maxBytes);
  std::printf("# tcp_probe: loopback TCP, both directions at once, 1 socket each way, %d iters, %d warmup\n",
              options.iters, options.warmupIters);
  std::printf("# %10s  %9s  %7s\n", "size", "time", "bw");
  std::printf("# %10s  %9s  %7s\n", "(B)", "(us)", "(GB/s)");
  int64_t wrong = 0;
  bool ok = true;
  for (size_t bytes : sizes) {
    for (int i = 0; i < options.warmupIters && ok; ++i) ok = exchange(parentFd, out.get(), in.get(), bytes);
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < options.iters && ok; ++i) ok = exchange(parentFd, out.get(), in.get(), bytes);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / options.iters;
    if (!ok) break;
    for (size_t i = 0; i < bytes; ++i) wrong += in.get()[i] != 0x3c;
    std::printf("%12zu  %9.1f  %7.2f\n", bytes, seconds * 1e6, static_cast<double>(bytes) / 1.0e9 / seconds);
    std::fflush(stdout);
  }
  close(parentFd);
  int status = 0;
  waitpid(child, &status, 0);
  if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "tcp_probe: the exchange failed\n");
    return 1;
  }
  if (wrong) std::fprintf(stderr, "tcp_probe: %lld received bytes differ\n", static_cast<long long>(wrong));
  return wrong ? 1 : 0;
}
