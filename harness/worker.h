#pragma once
// An isolated worker process: the attnfuzz binary itself, started with the hidden
// `worker` subcommand, talking line-delimited JSON over pipes. A crash (signal, abort,
// CUDA sticky error ending the process) or a hang (watchdog) is reported to the caller,
// which records it as a finding and restarts the worker; the campaign goes on.
#include <string>
#include <vector>

namespace attnfuzz {

class WorkerProcess {
 public:
  // argv[0] is the executable; env entries are "NAME=value" added to the environment.
  WorkerProcess(std::vector<std::string> argv, std::vector<std::string> env);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  struct Reply {
    enum class Status { ok, crashed, timed_out } status = Status::ok;
    std::string body;           // the reply line (without its "R " prefix)
    std::string last_progress;  // the last "P ..." line before the reply or the death
    std::string detail;         // how it died (signal, exit status)
  };
  // Sends one request line and waits for the reply, at most timeout_s seconds.
  Reply request(const std::string& line, double timeout_s);
  // Replaces the worker with a fresh process (after a GPU error left its CUDA context unusable).
  void restart() {
    stop();
    start();
  }
  pid_t pid() const { return pid_; }

 private:
  void start();
  void stop();
  std::vector<std::string> argv_, env_;
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  std::string buffer_;
};

// The path of the running executable (/proc/self/exe).
std::string self_executable();

}  // namespace attnfuzz
