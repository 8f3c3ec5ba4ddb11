#pragma once
// An isolated worker process, the transport under the campaign's workers (the attnfuzz binary
// itself, started with the hidden `worker` subcommand, speaking campaign/worker_protocol.h) and
// the Python bridge's workers (backends/python_backend.h): framed messages over two pipes. A
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

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/worker_frame.h"

namespace attnfuzz {

// "REQUEST_FD,REPLY_FD" in the worker's environment.
inline constexpr const char* kWorkerFdsEnv = "ATTNFUZZ_WORKER_FDS";

// Compile time is not run time. A progress frame whose payload starts with kCompilingProgress
// says "a JIT compiler in the backend is still at work" (torch.compile: the Python bridge sends
// one every few seconds while a compile runs). Each one moves the request's watchdog to at
// least timeout_s from now, but never past compile_limit_seconds() beyond the first deadline,
// and is passed on to this process's own parent when it is a worker. So a compile of any
// length within the limit is not a timeout, a hang (no such frames) still is, and so is a
// compiler that runs past the limit.
inline constexpr const char* kCompilingProgress = "compiling";
// ATTNFUZZ_COMPILE_LIMIT_S, default 900: the most compile time one request may add.
double compile_limit_seconds();

class WorkerProcess {
 public:
  // argv[0] is the executable; env entries are "NAME=value" added to the environment.
  WorkerProcess(std::vector<std::string> argv, std::vector<std::string> env);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  struct Reply {
    // abandoned: the caller's abandon flag was raised while the worker worked (abandon_when):
    // the worker was killed, and the request tells nothing about its case.
    enum class Status { ok, crashed, timed_out, abandoned } status = Status::ok;
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
  // From now on a request returns as soon as *flag is true (checked at least once a second),
  // killing the worker: a campaign whose time is up does not wait for the cases in flight.
  void abandon_when(const std::atomic<bool>* flag) { abandon_ = flag; }
  const std::atomic<bool>* abandon_flag() const { return abandon_; }

 private:
  void start();
  void stop();
  // One request on its way: its frame, how much of it is written, its watchdog, its reply.
  struct InFlight;
  // Takes the frames read so far: progress and this request's reply; anything else is stale.
  bool take_reply(InFlight& r);
  // Reads a bounded amount of what the worker sent: replied, closed (it exited), or neither.
  enum class Drained { more, replied, closed };
  Drained drain(InFlight& r);
  // The worker is dead or killed: reaps it (`reaped`: its status, where already collected),
  // says how it died, and starts a fresh one for the next request.
  Reply died(InFlight& r, Reply::Status st, const int* reaped = nullptr);
  std::vector<std::string> argv_, env_;
  pid_t pid_ = -1;
  pid_t group_ = -1;  // a dead worker's process group, killed by stop()
  int to_child_ = -1, from_child_ = -1;
  uint64_t seq_ = 0;
  FrameReader reader_;
  const std::atomic<bool>* abandon_ = nullptr;
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
  // Sends a compiling frame (kCompilingProgress) on the channel of this process's current
  // request, if this process is a worker serving one; otherwise nothing.
  static void relay_compiling(const std::string& text);

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
