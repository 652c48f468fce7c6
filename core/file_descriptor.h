// A file descriptor closed when it goes out of scope (shared memory objects opened only to
// be mapped: the mapping outlives the descriptor).
#pragma once

#include <unistd.h>

namespace chorus {

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace chorus
