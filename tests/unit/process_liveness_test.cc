// core/process_liveness.h: a process is alive while it holds the lock on its file; what a
// dead process left in /dev/shm (its liveness file, its FIFO segments) is removed, what a
// live one holds is not.
#include "core/process_liveness.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "tests/harness/child_process.h"

namespace chorus {
namespace {

using chorus_test::ChildProcess;

bool exists(const std::string& name) { return access(("/dev/shm/" + name).c_str(), F_OK) == 0; }

// Creates /dev/shm/<name>; returns its descriptor. Other test processes sweep /dev/shm at
// their start (ctest -j), so the files are made new (left alone by every sweep) and only
// dated back, with ageFile, once the handles and locks the test needs are in place.
int makeFile(const std::string& name) {
  const int fd = shm_open(("/" + name).c_str(), O_CREAT | O_RDWR, 0600);
  const timespec now[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};  // a file left by an earlier run is new again
  if (fd >= 0) futimens(fd, now);
  return fd;
}

// Dates the file a minute back: old enough for a sweep to judge it.
void ageFile(int fd) {
  const timespec times[2] = {{time(nullptr) - 60, 0}, {time(nullptr) - 60, 0}};
  futimens(fd, times);
  close(fd);
}

// A process that holds `name`'s lock until it is killed (POSIX locks belong to a process:
// this test cannot play the live process itself).
pid_t holdLockInChild(const std::string& name) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with the test, even if the test is killed
    const int fd = shm_open(("/" + name).c_str(), O_RDWR, 0);
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    const char ok = fd >= 0 && fcntl(fd, F_SETLK, &lock) == 0 ? 1 : 0;
    if (write(ready[1], &ok, 1) != 1) _exit(1);
    for (;;) pause();
  }
  char ok = 0;
  const bool locked = read(ready[0], &ok, 1) == 1 && ok;
  close(ready[0]);
  close(ready[1]);
  if (locked) return pid;
  ChildProcess failed(pid);
  return -1;
}

TEST(ProcessLiveness, DeadProcessesFilesGoLiveOnesStay) {
  const uint64_t deadId = 0x00c0ffee00000001ull, liveId = 0x00c0ffee00000002ull;
  const std::string dead = processTag(deadId), live = processTag(liveId);
  const int files[4] = {makeFile("chorus-alive-" + dead), makeFile("chorus-" + dead + "-1-0-0000000000000001"),
                        makeFile("chorus-alive-" + live), makeFile("chorus-" + live + "-1-0-0000000000000002")};
  for (const int fd : files) ASSERT_GE(fd, 0);
  ChildProcess liveProcess(holdLockInChild("chorus-alive-" + live));
  ASSERT_GT(liveProcess.pid(), 0);

  // A peer's handle on each: the dead one reads dead, the live one alive.
  const int onDead = openPeerLiveness(deadId), onLive = openPeerLiveness(liveId);
  ASSERT_GE(onDead, 0);
  ASSERT_GE(onLive, 0);
  for (const int fd : files) ageFile(fd);
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
  liveProcess.kill();
  EXPECT_FALSE(peerAlive(onLive, liveId));
  EXPECT_FALSE(exists("chorus-alive-" + live));
  EXPECT_FALSE(exists("chorus-" + live + "-1-0-0000000000000002"));
  closePeerLiveness(onLive);
}

}  // namespace
}  // namespace chorus
