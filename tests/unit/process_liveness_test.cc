// core/process_liveness.h: a process is alive while it holds the lock on its file; what a
// dead process left in /dev/shm (its liveness file, its FIFO segments) is removed, what a
// live one holds is not.
#include "core/process_liveness.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace chorus {
namespace {

bool exists(const std::string& name) { return access(("/dev/shm/" + name).c_str(), F_OK) == 0; }

// Creates /dev/shm/<name> dated a minute ago; returns its descriptor.
int makeOldFile(const std::string& name) {
  const int fd = shm_open(("/" + name).c_str(), O_CREAT | O_RDWR, 0600);
  const timespec times[2] = {{time(nullptr) - 60, 0}, {time(nullptr) - 60, 0}};
  futimens(fd, times);
  return fd;
}

// A process that holds `name`'s lock until it is killed (POSIX locks belong to a process:
// this test cannot play the live process itself).
pid_t holdLockInChild(const std::string& name) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = shm_open(("/" + name).c_str(), O_RDWR, 0);
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    const char ok = fd >= 0 && fcntl(fd, F_SETLK, &lock) == 0 ? 1 : 0;
    if (write(ready[1], &ok, 1) != 1) _exit(1);
    for (;;) pause();
  }
  char ok = 0;
  if (read(ready[0], &ok, 1) != 1 || !ok) return -1;
  close(ready[0]);
  close(ready[1]);
  return pid;
}

TEST(ProcessLiveness, DeadProcessesFilesGoLiveOnesStay) {
  const uint64_t deadId = 0x00c0ffee00000001ull, liveId = 0x00c0ffee00000002ull;
  const std::string dead = processTag(deadId), live = processTag(liveId);
  close(makeOldFile("chorus-alive-" + dead));
  close(makeOldFile("chorus-" + dead + "-1-0-0000000000000001"));
  close(makeOldFile("chorus-alive-" + live));
  close(makeOldFile("chorus-" + live + "-1-0-0000000000000002"));
  const pid_t liveProcess = holdLockInChild("chorus-alive-" + live);
  ASSERT_GT(liveProcess, 0);

  // A peer's handle on each: the dead one reads dead, the live one alive.
  const int onDead = openPeerLiveness(deadId), onLive = openPeerLiveness(liveId);
  ASSERT_GE(onDead, 0);
  ASSERT_GE(onLive, 0);
  EXPECT_TRUE(peerAlive(-1, 0)) << "no handle: nothing to tell by";
  removeWhatDeadProcessesLeft();
  EXPECT_FALSE(exists("chorus-alive-" + dead));
  EXPECT_FALSE(exists("chorus-" + dead + "-1-0-0000000000000001"));
  EXPECT_TRUE(exists("chorus-alive-" + live));
  EXPECT_TRUE(exists("chorus-" + live + "-1-0-0000000000000002"));
  EXPECT_FALSE(peerAlive(onDead, deadId));
  EXPECT_TRUE(peerAlive(onLive, liveId));
  EXPECT_TRUE(peerAlive(onLive, liveId)) << "checking does not take the live process's lock away";
  closePeerLiveness(onDead);

  // The live one dies (its lock goes): a peer's check says so and removes its files.
  kill(liveProcess, SIGKILL);
  waitpid(liveProcess, nullptr, 0);
  EXPECT_FALSE(peerAlive(onLive, liveId));
  EXPECT_FALSE(exists("chorus-alive-" + live));
  EXPECT_FALSE(exists("chorus-" + live + "-1-0-0000000000000002"));
  closePeerLiveness(onLive);
}

}  // namespace
}  // namespace chorus
