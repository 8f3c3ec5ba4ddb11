#pragma once
// An isolated worker process, the transport under the campaign's workers (the attnfuzz binary
// itself, started with the hidden `worker` subcommand, speaking campaign/worker_protocol.h) and
// the Python bridge's workers (oracles/python_backend.h): framed messages over two pipes. A
// crash (signal, abort, exit, a CUDA sticky error ending the process) or a hang (watchdog) is
// reported to the caller, which records it as a finding and restarts the worker; the campaign
// goes on.
//
// The pipes sit at high descriptor numbers in the worker (kWorkerFdsEnv names them) and every
// other inherited descriptor but stdin (/dev/null), stdout and stderr (both the parent's
// stderr) is closed, so a backend that writes to "whatever fd 3 is" hits nothing of ours;
// whatever it writes anyway cannot forge a frame by accident, and the parent keeps draining
// the reply pipe, so its watchdog always fires.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/worker_frame.h"

namespace attnfuzz {

// "REQUEST_FD,REPLY_FD" in the worker's environment.
inline constexpr const char* kWorkerFdsEnv = "ATTNFUZZ_WORKER_FDS";

class WorkerProcess {
 public:
  // argv[0] is the executable; env entries are "NAME=value" added to the environment.
  WorkerProcess(std::vector<std::string> argv, std::vector<std::string> env);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  struct Reply {
    enum class Status { ok, crashed, timed_out } status = Status::ok;
    std::string body;           // the reply's payload
    std::string last_progress;  // the last progress message before the reply or the death
    std::string detail;         // how it died (signal, exit status)
  };
  // Sends one request and waits for its reply, at most timeout_s seconds (writing included).
  Reply request(const std::string& body, double timeout_s);
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
  uint64_t seq_ = 0;
  FrameReader reader_;
};

// The worker's side of the protocol, set up from kWorkerFdsEnv.
class WorkerChannel {
 public:
  // Throws std::runtime_error when the process was not started by WorkerProcess.
  static WorkerChannel from_environment();
  // Blocks for the next request; false when the parent closed the pipe.
  bool next_request(std::string& body);
  void progress(const std::string& text) { send('P', text); }
  void reply(const std::string& body) { send('R', body); }

 private:
  WorkerChannel(int in, int out) : in_(in), out_(out) {}
  void send(char kind, const std::string& payload);
  int in_, out_;
  uint64_t seq_ = 0;  // of the request being answered
  FrameReader reader_;
};

// The path of the running executable (/proc/self/exe).
std::string self_executable();

}  // namespace attnfuzz
