#include "campaign/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "campaign/run_dir.h"
#include "harness/errors.h"

namespace attnfuzz {
namespace fs = std::filesystem;

// One locked lock file of this process: flock locks belong to an open file description, so a
// second open and flock of the same file in this process would conflict with the first. The
// process id is part of the key: a forked child inherits the table but not the right to join.
using LockId = std::tuple<dev_t, ino_t, pid_t>;
struct DirLock::Held {
  int fd = -1;
  int holders = 0;
  LockId id;
};

namespace {
std::mutex held_m;
std::map<LockId, std::unique_ptr<DirLock::Held>>& held_locks() {
  static std::map<LockId, std::unique_ptr<DirLock::Held>> m;
  return m;
}
}  // namespace

DirLock::DirLock(const std::string& dir) {
  const std::string path = dir + "/" + rundir::kLockFile;
  const std::string shown = message_safe(path);
  // O_CLOEXEC: worker processes must not inherit (and so keep holding) the lock. O_NOFOLLOW and
  // the check below: a symbolic link, FIFO or device planted as `lock` is not opened as one.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK, 0644);
  if (fd < 0) throw DirLockError("cannot open " + shown + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw DirLockError("cannot lock " + shown + ": not a regular file");
  }
  const LockId id{st.st_dev, st.st_ino, ::getpid()};
  std::lock_guard<std::mutex> guard(held_m);
  auto& held = held_locks();
  if (const auto it = held.find(id); it != held.end()) {
    ::close(fd);
    held_ = it->second.get();
    ++held_->holders;
    return;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK)
      throw DirLockError(message_safe(dir) + " is in use by another attnfuzz campaign (" + shown +
                         " is locked): wait for it to end, or use another directory");
    throw DirLockError("cannot lock " + shown + ": " + std::strerror(err));
  }
  held_ = held.emplace(id, std::make_unique<Held>(Held{fd, 1, id})).first->second.get();
}

DirLock::~DirLock() {
  std::lock_guard<std::mutex> guard(held_m);
  if (--held_->holders > 0) return;
  ::close(held_->fd);
  held_locks().erase(held_->id);
}

std::optional<std::string> campaign_directory_of(const std::string& path) {
  std::error_code ec;
  fs::path dir = fs::absolute(path, ec).parent_path();
  if (ec) return std::nullopt;
  for (int up = 0; up < 2 && !dir.empty(); ++up, dir = dir.parent_path()) {
    if (fs::exists(dir / rundir::kStateFile, ec) || fs::exists(fs::symlink_status(dir / rundir::kLockFile, ec))) return dir.string();
    if (dir.parent_path() == dir) break;
  }
  return std::nullopt;
}

}  // namespace attnfuzz
