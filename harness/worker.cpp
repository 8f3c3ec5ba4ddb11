#include "harness/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace attnfuzz {

std::string self_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot resolve /proc/self/exe");
  return std::string(buf, static_cast<size_t>(n));
}

WorkerProcess::WorkerProcess(std::vector<std::string> argv, std::vector<std::string> env) : argv_(std::move(argv)), env_(std::move(env)) {
  start();
}

WorkerProcess::~WorkerProcess() { stop(); }

void WorkerProcess::start() {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) envs.emplace_back(*e);
  for (const auto& e : env_) envs.push_back(e);
  std::vector<char*> cargv, cenv;
  for (auto& a : argv_) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : envs) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    // A worker must not outlive its campaign (a hung one would spin forever): the kernel
    // kills it when the parent dies, even by SIGKILL.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() == 1) ::_exit(1);  // the parent died before prctl took effect
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::execve(cargv[0], cargv.data(), cenv.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  to_child_ = in[1];
  from_child_ = out[0];
  buffer_.clear();
}

void WorkerProcess::stop() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (to_child_ >= 0) ::close(to_child_);
  if (from_child_ >= 0) ::close(from_child_);
  pid_ = -1, to_child_ = -1, from_child_ = -1;
}

WorkerProcess::Reply WorkerProcess::request(const std::string& line, double timeout_s) {
  Reply reply;
  auto died = [&](Reply::Status st) {
    int status = 0;
    if (st == Reply::Status::timed_out) ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    if (st == Reply::Status::timed_out)
      reply.detail = "no reply within " + std::to_string(timeout_s) + " s; killed";
    else if (WIFSIGNALED(status))
      reply.detail = std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
    else
      reply.detail = "exited with status " + std::to_string(WEXITSTATUS(status));
    reply.status = st;
    stop();
    start();  // a fresh worker for the next request
    return reply;
  };
  const std::string msg = line + "\n";
  size_t off = 0;
  ::signal(SIGPIPE, SIG_IGN);
  while (off < msg.size()) {
    const ssize_t n = ::write(to_child_, msg.data() + off, msg.size() - off);
    if (n <= 0) return died(Reply::Status::crashed);
    off += static_cast<size_t>(n);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    size_t nl;
    while ((nl = buffer_.find('\n')) != std::string::npos) {
      std::string l = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (l.rfind("P ", 0) == 0) {
        reply.last_progress = l.substr(2);
      } else if (l.rfind("R ", 0) == 0) {
        reply.body = l.substr(2);
        return reply;
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return died(Reply::Status::timed_out);
    pollfd pfd{from_child_, POLLIN, 0};
    const int pr = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) continue;
    char buf[65536];
    const ssize_t n = ::read(from_child_, buf, sizeof buf);
    if (n <= 0) return died(Reply::Status::crashed);
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace attnfuzz
