#include "harness/isolated_call.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>

namespace attnfuzz {

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

bool write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

namespace {

// The answer on the pipe: 'O' and fn's result, or 'E' and the exception's message, after 16 hex
// digits of the payload's length.
constexpr size_t kHeaderSize = 17;

// The child's side: run fn, write its answer, and _exit: no static destructors of libraries the
// call loaded (they may not survive a fork).
[[noreturn]] void answer_and_exit(const std::function<std::string()>& fn, int fd) {
  char kind = 'O';
  std::string body;
  try {
    body = fn();
  } catch (const std::exception& e) {
    kind = 'E', body = e.what();
  } catch (...) {
    kind = 'E', body = "unknown exception";
  }
  char header[32];
  std::snprintf(header, sizeof header, "%c%016zx", kind, body.size());
  write_all(fd, header + body);
  ::close(fd);
  ::_exit(0);
}

// What has come through the pipe so far. Complete once all of the payload is here (a descendant
// of the child may hold the pipe open, so EOF need not come).
struct Answer {
  std::string got;
  size_t payload_size() const { return std::strtoull(got.substr(1, 16).c_str(), nullptr, 16); }
  bool complete() const { return got.size() >= kHeaderSize && got.size() - kHeaderSize >= payload_size(); }
  // Fills r from a complete, well-formed answer.
  bool read_into(IsolatedCall& r) const {
    if (!complete() || (got[0] != 'O' && got[0] != 'E')) return false;
    r.status = got[0] == 'O' ? IsolatedCall::Status::ok : IsolatedCall::Status::failed;
    r.payload = got.substr(kHeaderSize, payload_size());
    return true;
  }
};

IsolatedCall crashed(int status, const char* unless_signalled) {
  IsolatedCall r;
  r.status = IsolatedCall::Status::crashed;
  r.detail = describe_exit(status) + (WIFSIGNALED(status) ? "" : unless_signalled);
  return r;
}

// The parent's side: read the answer until it is complete, the pipe closes or the deadline
// passes. Returns the child's exit status where it was reaped here (it died while a descendant
// held the pipe open), -1 otherwise.
int read_answer(int fd, pid_t pid, double timeout_s, Answer& a, bool& timed_out) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      return -1;
    }
    pollfd p{fd, POLLIN, 0};
    const int ms = left > 1.0 ? 1000 : static_cast<int>(left * 1000) + 1;
    const int n = ::poll(&p, 1, ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) return status;
      continue;
    }
    char buf[65536];
    const ssize_t k = ::read(fd, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;  // EOF: the child closed its end (answered, or died)
    a.got.append(buf, static_cast<size_t>(k));
    if (a.complete()) return -1;
  }
}

}  // namespace

IsolatedCall call_isolated(const std::function<std::string()>& fn, double timeout_s) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(std::string("isolated call: pipe: ") + std::strerror(errno));
  std::fflush(nullptr);  // what is buffered is written once, not once more by the child
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]), ::close(fds[1]);
    throw std::runtime_error(std::string("isolated call: fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::close(fds[0]);
    answer_and_exit(fn, fds[1]);
  }
  ::setpgid(pid, pid);  // both sides: whichever runs first
  ::close(fds[1]);
  IsolatedCall r;
  Answer a;
  bool timed_out = false;
  const int reaped = read_answer(fds[0], pid, timeout_s, a, timed_out);
  ::close(fds[0]);
  ::kill(-pid, SIGKILL);  // the child's group: anything it forked too
  if (reaped != -1) {
    // The child died while a descendant held the pipe: its exit status says so.
    if (a.read_into(r)) return r;
    return crashed(reaped, " before it answered");
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    r.status = IsolatedCall::Status::timed_out;
    r.detail = "no answer within " + std::to_string(timeout_s) + " s (killed)";
    return r;
  }
  if (a.read_into(r)) return r;
  return crashed(status, " without an answer");
}

}  // namespace attnfuzz
