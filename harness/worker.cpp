#include "harness/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "harness/isolated_call.h"

extern char** environ;

namespace attnfuzz {

std::string self_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot resolve /proc/self/exe");
  return std::string(buf, static_cast<size_t>(n));
}

namespace {
double seconds_from_env(const char* name, double fallback) {
  const char* v = std::getenv(name);
  const double t = v ? std::atof(v) : 0.0;
  return t > 0 ? t : fallback;
}
}  // namespace

double compile_limit_seconds() { return seconds_from_env("ATTNFUZZ_COMPILE_LIMIT_S", 900.0); }
double watchdog_growth_limit_seconds() {
  // 0 is a limit here (no growth), so not seconds_from_env's "unset".
  const char* v = std::getenv("ATTNFUZZ_WATCHDOG_GROWTH_LIMIT_S");
  if (!v || !*v) return 3600.0;
  char* end = nullptr;
  const double t = std::strtod(v, &end);
  return *end == '\0' && t >= 0 && std::isfinite(t) ? t : 3600.0;
}
double harness_work_limit_seconds() { return seconds_from_env("ATTNFUZZ_HARNESS_WORK_LIMIT_S", 3600.0); }

namespace {

// The channel of the request this worker process is serving (one per process), for
// relay_compiling: a backend's own worker (the Python bridge's) reports its compiles up here.
WorkerChannel* serving_channel = nullptr;
// Frames reach the pipe whole from any thread (WorkHeartbeat's beside the worker's own).
std::mutex send_m;

bool starts_with(const std::string& payload, const char* prefix) { return payload.compare(0, std::strlen(prefix), prefix) == 0; }

// The protocol's descriptors in the worker: the top two below the descriptor limit (1024
// at most), far from the 3, 4, 5... a library or a stray write would use.
std::pair<int, int> worker_fds() {
  rlimit rl{};
  long top = 1024;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) top = std::min<long>(top, static_cast<long>(rl.rlim_cur));
  top = std::max<long>(top, 16);
  return {static_cast<int>(top - 2), static_cast<int>(top - 1)};
}

}  // namespace

WorkerProcess::WorkerProcess(std::vector<std::string> argv, std::vector<std::string> env) : argv_(std::move(argv)), env_(std::move(env)) {
  start();
}

WorkerProcess::~WorkerProcess() { stop(); }

void WorkerProcess::start() {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe failed: ") + std::strerror(errno));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]), ::close(in[1]);
    throw std::runtime_error(std::string("pipe failed: ") + std::strerror(errno));
  }
  const auto [req_fd, rep_fd] = worker_fds();
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, kWorkerFdsEnv, std::strlen(kWorkerFdsEnv)) != 0) envs.emplace_back(*e);
  envs.push_back(std::string(kWorkerFdsEnv) + "=" + std::to_string(req_fd) + "," + std::to_string(rep_fd));
  for (const auto& e : env_) envs.push_back(e);
  std::vector<char*> cargv, cenv;
  for (auto& a : argv_) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : envs) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  pid_ = ::fork();
  if (pid_ < 0) {
    for (int fd : {in[0], in[1], out[0], out[1], devnull}) ::close(fd);
    throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  }
  if (pid_ == 0) {
    // A worker must not outlive its campaign (a hung one would spin forever): the kernel
    // kills it when the parent dies, even by SIGKILL.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() == 1) ::_exit(1);  // the parent died before prctl took effect
    // Its own process group: whatever a backend forks stays in it, and dies with the worker
    // (stop() and a timeout kill the group), holding its pipes or not.
    ::setpgid(0, 0);
    // Only async-signal-safe calls from here on. dup2 clears close-on-exec on the copies.
    if (::dup2(in[0], req_fd) < 0 || ::dup2(out[1], rep_fd) < 0) ::_exit(126);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(2, 1);  // anything a backend prints goes to stderr
    ::close_range(3, static_cast<unsigned>(req_fd - 1), 0);
    ::close_range(static_cast<unsigned>(rep_fd + 1), ~0u, 0);
    ::execve(cargv[0], cargv.data(), cenv.data());
    ::_exit(127);
  }
  ::setpgid(pid_, pid_);  // also here: no kill of the group can come before the child's own call
  if (devnull >= 0) ::close(devnull);
  ::close(in[0]);
  ::close(out[1]);
  to_child_ = in[1];
  from_child_ = out[0];
  // Non-blocking: a request is written while the replies are drained, under the watchdog.
  ::fcntl(to_child_, F_SETFL, ::fcntl(to_child_, F_GETFL) | O_NONBLOCK);
  ::fcntl(from_child_, F_SETFL, ::fcntl(from_child_, F_GETFL) | O_NONBLOCK);
  reader_ = FrameReader{};
}

void WorkerProcess::stop() {
  if (pid_ > 0) {
    ::kill(-pid_, SIGKILL);  // the worker's group: what its backends forked too
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  } else if (group_ > 0) {
    ::kill(-group_, SIGKILL);  // the worker is gone (reaped), what it forked may not be
  }
  group_ = -1;
  if (to_child_ >= 0) ::close(to_child_);
  if (from_child_ >= 0) ::close(from_child_);
  pid_ = -1;
  to_child_ = -1;
  from_child_ = -1;
}

struct WorkerProcess::InFlight {
  using Clock = std::chrono::steady_clock;
  InFlight(uint64_t seq, const std::string& body, double timeout)
      : seq(seq),
        msg(encode_frame('Q', seq, body)),
        timeout_s(timeout),
        first_deadline(Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout))),
        deadline(first_deadline),
        compile_deadline(first_deadline + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(compile_limit_seconds()))),
        harness_deadline(first_deadline + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(harness_work_limit_seconds()))) {}
  bool written() const { return off == msg.size(); }
  const uint64_t seq;
  const std::string msg;
  size_t off = 0;
  const double timeout_s;
  const Clock::time_point first_deadline;
  Clock::time_point deadline;  // moved on by compiling and harness-work notices, up to their deadlines
  const Clock::time_point compile_deadline;
  const Clock::time_point harness_deadline;
  Reply reply;
};

bool WorkerProcess::take_reply(InFlight& r) {
  while (auto f = reader_.next()) {
    if (f->seq != r.seq) continue;
    const bool compiling = f->kind == 'P' && starts_with(f->payload, kCompilingProgress);
    const bool harness_work = f->kind == 'P' && starts_with(f->payload, kHarnessWorkProgress);
    if (compiling || harness_work) {  // not the backend's run: the watchdog waits, up to the kind's limit
      const auto wanted = InFlight::Clock::now() + std::chrono::duration_cast<InFlight::Clock::duration>(std::chrono::duration<double>(r.timeout_s));
      r.deadline = std::max(r.deadline, std::min(wanted, compiling ? r.compile_deadline : r.harness_deadline));
      WorkerChannel::relay_compiling(f->payload);
      continue;
    }
    if (f->kind == 'P') r.reply.last_progress = f->payload;
    if (f->kind == 'R' && r.written()) {
      r.reply.body = std::move(f->payload);
      return true;
    }
  }
  return false;
}

WorkerProcess::Drained WorkerProcess::drain(InFlight& r) {
  // A bounded amount, then the caller looks at the watchdog again: a worker flooding the pipe
  // never blocks on it, and never keeps the watchdog from firing.
  char buf[65536];
  for (int chunk = 0; chunk < 16; ++chunk) {
    const ssize_t n = ::read(from_child_, buf, sizeof buf);
    if (n > 0) {
      reader_.append(buf, static_cast<size_t>(n));
      if (take_reply(r)) return Drained::replied;
      continue;
    }
    if (n == 0) return Drained::closed;  // the worker closed its end: it exited
    if (errno == EINTR) continue;
    break;  // EAGAIN: drained
  }
  return Drained::more;
}

WorkerProcess::Reply WorkerProcess::died(InFlight& r, Reply::Status st, const int* reaped) {
  int status = reaped ? *reaped : 0;
  if (st == Reply::Status::timed_out) ::kill(-pid_, SIGKILL), ::kill(pid_, SIGKILL);
  if (!reaped) ::waitpid(pid_, &status, 0);
  group_ = pid_;  // stop() kills what is left of the group
  pid_ = -1;
  Reply& reply = r.reply;
  if (st == Reply::Status::timed_out) {
    reply.detail = "no reply within " + std::to_string(r.timeout_s) + " s; killed";
    if (r.deadline > r.first_deadline)
      reply.detail += " (waited " + std::to_string(std::chrono::duration<double>(r.deadline - r.first_deadline).count()) +
                      " s more for compiling and harness-work notices, ATTNFUZZ_COMPILE_LIMIT_S, ATTNFUZZ_HARNESS_WORK_LIMIT_S)";
  } else {
    reply.detail = describe_exit(status);
  }
  reply.status = st;
  stop();
  start();  // a fresh worker for the next request
  return reply;
}

WorkerProcess::Reply WorkerProcess::request(const std::string& body, double timeout_s) {
  // A worker that died must not kill us through a write to its pipe. Set once: one syscall
  // fewer per request (the Python bridge makes one request per backend call).
  static const bool sigpipe_ignored = (::signal(SIGPIPE, SIG_IGN), true);
  (void)sigpipe_ignored;
  InFlight r(++seq_, body, timeout_s);
  for (;;) {
    if (take_reply(r)) return r.reply;
    if (abandon_ && abandon_->load()) {
      stop();  // the worker and its group; no fresh one: the caller is done with it
      r.reply.status = Reply::Status::abandoned;
      r.reply.detail = "abandoned: the caller stopped waiting";
      return r.reply;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(r.deadline - InFlight::Clock::now()).count();
    if (left <= 0) return died(r, Reply::Status::timed_out);
    pollfd pfd[2] = {{from_child_, POLLIN, 0}, {to_child_, POLLOUT, 0}};
    const int pr = ::poll(pfd, r.written() ? 1 : 2, static_cast<int>(std::min<long long>(left, 1000)));
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return died(r, Reply::Status::crashed);
    if (pr == 0) {
      // No byte and no hang-up for a second: a process the worker forked may hold its pipe
      // open after the worker itself died. The worker's own exit decides.
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) return died(r, Reply::Status::crashed, &status);
      continue;
    }
    if (!r.written() && (pfd[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t n = ::write(to_child_, r.msg.data() + r.off, r.msg.size() - r.off);
      if (n > 0)
        r.off += static_cast<size_t>(n);
      else if (n < 0 && errno != EAGAIN && errno != EINTR)
        return died(r, Reply::Status::crashed);
    }
    if (pfd[0].revents & (POLLIN | POLLERR | POLLHUP)) {
      const Drained d = drain(r);
      if (d == Drained::replied) return r.reply;
      if (d == Drained::closed) return died(r, Reply::Status::crashed);
    }
  }
}

WorkerChannel WorkerChannel::from_environment() {
  const char* v = std::getenv(kWorkerFdsEnv);
  int in = -1, out = -1;
  if (!v || std::sscanf(v, "%d,%d", &in, &out) != 2 || ::fcntl(in, F_GETFD) < 0 || ::fcntl(out, F_GETFD) < 0)
    throw std::runtime_error(std::string("the worker is started by attnfuzz campaign, check, replay or minimize (") + kWorkerFdsEnv +
                             " is not set up)");
  // Nothing the worker starts (nvidia-smi for the environment, say) inherits the protocol.
  ::fcntl(in, F_SETFD, FD_CLOEXEC);
  ::fcntl(out, F_SETFD, FD_CLOEXEC);
  ::unsetenv(kWorkerFdsEnv);
  return WorkerChannel(in, out);
}

void WorkerChannel::relay_compiling(const std::string& text) {
  if (serving_channel) serving_channel->progress(text);
}

bool WorkerChannel::serving() { return serving_channel != nullptr; }

struct WorkHeartbeat::Beat {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread thread;
};

WorkHeartbeat::WorkHeartbeat(const char* kind, const std::string& what) {
  if (!WorkerChannel::serving()) return;
  const std::string text = std::string(kind) + ": " + what;
  WorkerChannel::relay_compiling(text);
  beat_ = std::make_unique<Beat>();
  beat_->thread = std::thread([b = beat_.get(), text] {
    std::unique_lock<std::mutex> lock(b->m);
    while (!b->cv.wait_for(lock, std::chrono::duration<double>(kHeartbeatSeconds), [b] { return b->done; }))
      WorkerChannel::relay_compiling(text);
  });
}

WorkHeartbeat::~WorkHeartbeat() {
  if (!beat_) return;
  {
    std::lock_guard<std::mutex> lock(beat_->m);
    beat_->done = true;
  }
  beat_->cv.notify_one();
  beat_->thread.join();
}

bool WorkerChannel::next_request(std::string& body) {
  serving_channel = this;
  for (;;) {
    while (auto f = reader_.next())
      if (f->kind == 'Q') {
        seq_ = f->seq;
        body = std::move(f->payload);
        return true;
      }
    char buf[65536];
    const ssize_t n = ::read(in_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    reader_.append(buf, static_cast<size_t>(n));
  }
}

void WorkerChannel::send(char kind, const std::string& payload) {
  std::lock_guard<std::mutex> lock(send_m);
  const std::string msg = encode_frame(kind, seq_, payload);
  size_t off = 0;
  while (off < msg.size()) {
    const ssize_t n = ::write(out_, msg.data() + off, msg.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ::_exit(3);  // the parent is gone: nothing left to answer
    off += static_cast<size_t>(n);
  }
}

}  // namespace attnfuzz
