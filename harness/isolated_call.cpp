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
    // The answer: 'O' and fn's result, or 'E' and the exception's message. _exit: no static
    // destructors of libraries the call loaded (they may not survive a fork).
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
    write_all(fds[1], header + body);
    ::close(fds[1]);
    ::_exit(0);
  }
  ::setpgid(pid, pid);  // both sides: whichever runs first
  ::close(fds[1]);
  IsolatedCall r;
  std::string got;
  // The answer: kind, 16 hex digits of length, the payload. Complete once all of it is here (a
  // descendant of the child may hold the pipe open, so EOF need not come).
  auto complete = [&] {
    return got.size() >= 17 && got.size() - 17 >= std::strtoull(got.substr(1, 16).c_str(), nullptr, 16);
  };
  auto answered = [&] {
    if (!complete() || (got[0] != 'O' && got[0] != 'E')) return false;
    r.status = got[0] == 'O' ? IsolatedCall::Status::ok : IsolatedCall::Status::failed;
    r.payload = got.substr(17, std::strtoull(got.substr(1, 16).c_str(), nullptr, 16));
    return true;
  };
  bool timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ms = left > 1.0 ? 1000 : static_cast<int>(left * 1000) + 1;
    const int n = ::poll(&p, 1, ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (n == 0) {
      // A child that died while a descendant holds the pipe: its exit status says so.
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        ::kill(-pid, SIGKILL);
        ::close(fds[0]);
        if (answered()) return r;
        r.status = IsolatedCall::Status::crashed;
        r.detail = describe_exit(status) + (WIFSIGNALED(status) ? "" : " before it answered");
        return r;
      }
      continue;
    }
    char buf[65536];
    const ssize_t k = ::read(fds[0], buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;  // EOF: the child closed its end (answered, or died)
    got.append(buf, static_cast<size_t>(k));
    if (complete()) break;
  }
  ::close(fds[0]);
  ::kill(-pid, SIGKILL);  // the child's group: anything it forked too
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    r.status = IsolatedCall::Status::timed_out;
    r.detail = "no answer within " + std::to_string(timeout_s) + " s (killed)";
    return r;
  }
  if (answered()) return r;
  r.status = IsolatedCall::Status::crashed;
  r.detail = describe_exit(status) + (WIFSIGNALED(status) ? "" : " without an answer");
  return r;
}

}  // namespace attnfuzz
