#pragma once
// An exclusive advisory lock on a campaign directory (flock on DIR/lock), held for the lifetime
// of the object. Every command that writes into a campaign directory takes it (campaign,
// check, merge --out, report, minimize of a finding inside one), so none of them writes or
// deletes under a campaign that is running (a check empties its directory first). The lock dies with the process, even by SIGKILL, so a killed campaign never leaves
// a stale lock behind.
//
// Within one process the lock is shared: a DirLock on a directory this process already holds
// (check holds its directory, the campaign it runs takes it again) joins the held lock instead
// of conflicting with it; the file is unlocked when the last holder goes.
#include <optional>
#include <stdexcept>
#include <string>

namespace attnfuzz {

// The directory is in use by another process's campaign, or its lock cannot be taken.
class DirLockError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class DirLock {
 public:
  // Throws DirLockError naming the directory when another process holds the lock.
  explicit DirLock(const std::string& dir);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  struct Held;  // the process's lock on one lock file (dir_lock.cpp)

 private:
  Held* held_ = nullptr;
};

// The campaign directory a file written at `path` lands in: its own directory or that one's
// parent (DIR/findings/X.min.json), when it holds a campaign's state.json or lock. Nothing
// when the file goes elsewhere.
std::optional<std::string> campaign_directory_of(const std::string& path);

}  // namespace attnfuzz
