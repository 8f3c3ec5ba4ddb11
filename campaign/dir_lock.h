#pragma once
// An exclusive advisory lock on a directory (flock on DIR/lock), held for the lifetime of
// the object, so two campaigns never write the same output directory at once (a second
// `campaign --resume` would otherwise rewind the first one's state). The lock dies with the
// process, even by SIGKILL, so a killed campaign never leaves a stale lock behind.
#include <string>

namespace attnfuzz {

class DirLock {
 public:
  // Throws std::runtime_error naming the directory when another process holds the lock.
  explicit DirLock(const std::string& dir);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace attnfuzz
