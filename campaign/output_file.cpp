#include "campaign/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "harness/errors.h"

namespace attnfuzz {
namespace fs = std::filesystem;

namespace {

// What is at `path` now, when it is something a write must not replace.
std::optional<std::string> refused_target(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::nullopt;  // a new name
    return std::string("cannot examine it: ") + std::strerror(errno);
  }
  if (S_ISREG(st.st_mode)) return std::nullopt;
  if (S_ISLNK(st.st_mode)) return "is a symbolic link: attnfuzz replaces only regular files; name the file itself";
  if (S_ISDIR(st.st_mode)) return "is a directory";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "is a device node, not a regular file: refused";
  if (S_ISFIFO(st.st_mode)) return "is a FIFO, not a regular file: refused";
  if (S_ISSOCK(st.st_mode)) return "is a socket, not a regular file: refused";
  return "is not a regular file: refused";
}

std::string directory_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// A temporary name beside the target that nobody can predict: a name planted in advance is
// met by O_EXCL and a fresh name is drawn, it is never opened.
std::string temporary_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".tmp.%ld.%llu.%016llx", static_cast<long>(::getpid()), static_cast<unsigned long long>(counter++),
                static_cast<unsigned long long>(rng()));
  return path + suffix;
}

}  // namespace

std::optional<std::string> unwritable_output(const std::string& path) {
  if (const auto why = refused_target(path)) return why;
  const std::string dir = directory_of(path);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "no such directory: " + message_safe(dir);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return std::string("its directory is not writable: ") + std::strerror(errno);
  return std::nullopt;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string shown = message_safe(path);
  if (const auto why = refused_target(path)) throw OutputError("cannot write " + shown + ": " + *why);
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    tmp = temporary_name(path);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0644);
    if (fd < 0 && (errno != EEXIST || attempt >= 16))
      throw OutputError("cannot write " + shown + ": cannot create a temporary file beside it: " + std::strerror(errno));
  }
  auto fail = [&](const std::string& what, int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());  // ours: created by this call with O_EXCL
    throw OutputError(what + " " + shown + ": " + std::strerror(err));
  };
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write", n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
  // A full disk may only show at fsync or close: the file is renamed into place only whole.
  if (::fsync(fd) != 0) fail("cannot write", errno);
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) fail("cannot write", errno);
  // Looked at again just before the rename: something may have been put there meanwhile.
  if (const auto why = refused_target(path)) {
    ::unlink(tmp.c_str());
    throw OutputError("cannot write " + shown + ": " + *why);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename into", errno);
}

OutputResult write_files_atomic(const std::vector<OutputFile>& files) {
  OutputResult r;
  for (const auto& f : files) {
    try {
      write_file_atomic(f.path, f.text);
      r.written.push_back(f.path);
    } catch (const OutputError& e) {
      r.errors.push_back(e.what());
    }
  }
  return r;
}

}  // namespace attnfuzz
