// NCCL documentation, example 2: one rank per process, the unique id broadcast to all.
//
// With MPI (built with -DCHORUS_EXAMPLE_MPI, run under mpirun) rank 0 creates the id and
// MPI_Bcast hands it out, exactly as in NCCL's documentation. Without MPI the program
// forks the ranks itself: child 0 creates the id and writes it into one pipe per other
// child. The parent must not call ncclGetUniqueId before forking: the id's root is a
// listener thread of the process that created it, and fork does not copy threads.
//
// Its buffers are host memory, for the CPU executor: on a machine with a GPU, where new
// communicators are GPU communicators, run it with CHORUS_EXECUTOR=cpu.
//
//   usage: one_rank_per_process [nranks=2] [count=1048576]     (without MPI)
//          mpirun -np N one_rank_per_process_mpi [count]       (with MPI)
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "nccl.h"

#ifdef CHORUS_EXAMPLE_MPI
#include <mpi.h>
#else
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>
#endif

namespace {

// One rank's whole life: join, AllReduce, check, leave. Returns 0 when the result is right.
int runRank(int rank, int nranks, size_t count, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  ncclResult_t result = ncclCommInitRank(&comm, nranks, id, rank);
  if (result != ncclSuccess) {
    std::fprintf(stderr, "rank %d: ncclCommInitRank failed: %s (%s)\n", rank, ncclGetErrorString(result),
                 ncclGetLastError(nullptr));
    return 1;
  }
  std::vector<double> send(count), recv(count, -1.0);
  for (size_t i = 0; i < count; ++i) send[i] = rank + static_cast<double>(i % 13);
  result = ncclAllReduce(send.data(), recv.data(), count, ncclDouble, ncclSum, comm, nullptr);
  if (result != ncclSuccess) {
    std::fprintf(stderr, "rank %d: ncclAllReduce failed: %s (%s)\n", rank, ncclGetErrorString(result),
                 ncclGetLastError(comm));
    ncclCommAbort(comm);
    return 1;
  }
  size_t wrong = 0;
  const double rankSum = nranks * (nranks - 1) / 2.0;
  for (size_t i = 0; i < count; ++i)
    if (recv[i] != rankSum + static_cast<double>(nranks) * static_cast<double>(i % 13)) ++wrong;
  result = ncclCommDestroy(comm);
  if (result != ncclSuccess) {
    std::fprintf(stderr, "rank %d: ncclCommDestroy failed: %s\n", rank, ncclGetErrorString(result));
    return 1;
  }
  if (wrong != 0) {
    std::fprintf(stderr, "rank %d: %zu of %zu elements wrong\n", rank, wrong, count);
    return 1;
  }
  return 0;
}

#ifndef CHORUS_EXAMPLE_MPI

// A pipe whose ends close when they go out of scope (or earlier, by closeRead/closeWrite).
class Pipe {
 public:
  Pipe() {
    if (pipe(fds_) != 0) {
      std::fprintf(stderr, "pipe failed: %s\n", std::strerror(errno));
      fds_[0] = fds_[1] = -1;
    }
  }
  ~Pipe() {
    closeRead();
    closeWrite();
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  bool valid() const { return fds_[0] >= 0 && fds_[1] >= 0; }
  void closeRead() { closeEnd(0); }
  void closeWrite() { closeEnd(1); }
  bool writeAll(const void* data, size_t bytes) {
    for (const char* p = static_cast<const char*>(data); bytes > 0;) {
      ssize_t n = write(fds_[1], p, bytes);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n, bytes -= static_cast<size_t>(n);
    }
    return true;
  }
  bool readAll(void* data, size_t bytes) {
    for (char* p = static_cast<char*>(data); bytes > 0;) {
      ssize_t n = read(fds_[0], p, bytes);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;  // 0: the writer died before sending the id
      p += n, bytes -= static_cast<size_t>(n);
    }
    return true;
  }

 private:
  void closeEnd(int end) {
    if (fds_[end] >= 0) close(fds_[end]);
    fds_[end] = -1;
  }
  int fds_[2];
};

// Runs in child `rank`: obtain the id (rank 0 creates it), then run the rank.
int childMain(int rank, int nranks, size_t count, std::vector<Pipe>& idPipes) {
  ncclUniqueId id;
  if (rank == 0) {
    for (Pipe& p : idPipes) p.closeRead();
    ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) {
      std::fprintf(stderr, "rank 0: ncclGetUniqueId failed: %s\n", ncclGetErrorString(result));
      return 1;
    }
    for (int peer = 1; peer < nranks; ++peer) {
      if (!idPipes[peer].writeAll(&id, sizeof(id))) {
        std::fprintf(stderr, "rank 0: sending the id to rank %d failed: %s\n", peer, std::strerror(errno));
        return 1;
      }
      idPipes[peer].closeWrite();
    }
  } else {
    // Close every write end, so a dead rank 0 shows up as end of file instead of a hang.
    for (Pipe& p : idPipes) p.closeWrite();
    if (!idPipes[rank].readAll(&id, sizeof(id))) {
      std::fprintf(stderr, "rank %d: no unique id from rank 0\n", rank);
      return 1;
    }
  }
  return runRank(rank, nranks, count, id);
}

#endif

}  // namespace

#ifdef CHORUS_EXAMPLE_MPI

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  const size_t count = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 1 << 20;
  ncclUniqueId id;
  if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  int failed = runRank(rank, nranks, count, id), anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && !anyFailed) std::printf("one_rank_per_process: AllReduce over %d MPI ranks: OK\n", nranks);
  MPI_Finalize();
  return anyFailed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#else

int main(int argc, char** argv) {
  const int nranks = argc > 1 ? std::atoi(argv[1]) : 2;
  const size_t count = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : 1 << 20;
  if (nranks < 1) {
    std::fprintf(stderr, "usage: %s [nranks >= 1] [count]\n", argv[0]);
    return EXIT_FAILURE;
  }
  std::vector<Pipe> idPipes(nranks);  // idPipes[r] carries the id to rank r (r > 0)
  for (const Pipe& p : idPipes)
    if (!p.valid()) return EXIT_FAILURE;

  std::fflush(stdout);  // children must not inherit unwritten output
  std::vector<pid_t> children;
  for (int rank = 0; rank < nranks; ++rank) {
    pid_t pid = fork();
    if (pid < 0) {
      std::fprintf(stderr, "fork of rank %d failed: %s\n", rank, std::strerror(errno));
      for (pid_t child : children) kill(child, SIGKILL);
      return EXIT_FAILURE;
    }
    if (pid == 0) {
      int code = childMain(rank, nranks, count, idPipes);
      std::fflush(nullptr);
      _exit(code);  // skip the parent's atexit handlers and static destructors
    }
    children.push_back(pid);
  }
  idPipes.clear();  // the parent keeps no pipe ends

  // Wait for every rank; a rank that hangs past the deadline is killed, so the example never hangs.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int failed = 0, running = nranks;
  bool killed = false;
  std::vector<bool> done(nranks, false);
  while (running > 0) {
    for (int rank = 0; rank < nranks; ++rank) {
      int status = 0;
      if (done[rank] || waitpid(children[rank], &status, WNOHANG) != children[rank]) continue;
      done[rank] = true, --running;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "rank %d (pid %d) failed: %s %d\n", rank, static_cast<int>(children[rank]),
                     WIFEXITED(status) ? "exit code" : "signal",
                     WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        ++failed;
      }
    }
    if (running > 0 && !killed && std::chrono::steady_clock::now() > deadline) {
      killed = true;  // the next passes reap the killed ranks
      for (int rank = 0; rank < nranks; ++rank)
        if (!done[rank]) {
          std::fprintf(stderr, "rank %d (pid %d) timed out; killing it\n", rank, static_cast<int>(children[rank]));
          kill(children[rank], SIGKILL);
        }
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (failed != 0) return EXIT_FAILURE;
  std::printf("one_rank_per_process: AllReduce of %zu doubles over %d processes: OK\n", count, nranks);
  return EXIT_SUCCESS;
}

#endif
