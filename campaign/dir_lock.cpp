#include "campaign/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace attnfuzz {

DirLock::DirLock(const std::string& dir) {
  const std::string path = dir + "/lock";
  // O_CLOEXEC: worker processes must not inherit (and so keep holding) the lock.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK) throw std::runtime_error(dir + " is in use by another attnfuzz campaign (" + path + " is locked)");
    throw std::runtime_error("cannot lock " + path + ": " + std::strerror(err));
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace attnfuzz
