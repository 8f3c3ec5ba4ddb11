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
#include <memory>
#include <string>
#include <vector>

#include "harness/worker_frame.h"

namespace attnfuzz {

// "REQUEST_FD,REPLY_FD" in the worker's environment.
inline constexpr const char* kWorkerFdsEnv = "ATTNFUZZ_WORKER_FDS";

// Only the backend's own run counts against a request's watchdog. A progress frame whose payload
// starts with one of these kinds says that other work is under way, and moves the request's
// watchdog to at least timeout_s from now, but never past that kind's limit beyond the first
// deadline; it is passed on to this process's own parent when it is a worker:
//   kCompilingProgress   "compiling": a JIT compiler in the backend (torch.compile, through the
//                        Python bridge; cuDNN building and compiling the engines of a new graph)
//   kHarnessWorkProgress "harness": the harness's own work on the case (the float64 reference,
//                        the contract baselines, the error model, the verdict), minutes at real
//                        size on a CPU, and code that does not wait on a backend
// So a compile or a large case within the limits is not a timeout; a hang (no such frames) still
// is, and so is work that runs past its limit.
inline constexpr const char* kCompilingProgress = "compiling";
inline constexpr const char* kHarnessWorkProgress = "harness";
// ATTNFUZZ_COMPILE_LIMIT_S, default 900: the most compile time one request may add.
double compile_limit_seconds();
// ATTNFUZZ_HARNESS_WORK_LIMIT_S, default 3600: the most harness work one request may add.
double harness_work_limit_seconds();
// ATTNFUZZ_WATCHDOG_GROWTH_LIMIT_S, default 3600: the most a case's work may add to its watchdog
// (campaign/campaign.h, case_watchdog_seconds); 0 keeps every case at --timeout.
double watchdog_growth_limit_seconds();

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
  // Sends a progress frame of a watchdog-moving kind (kCompilingProgress, kHarnessWorkProgress) on
  // the channel of this process's current request, if this process is a worker serving one;
  // otherwise nothing. Safe from any thread.
  static void relay_compiling(const std::string& text);
  // Whether this process is a worker serving requests.
  static bool serving();

 private:
  WorkerChannel(int in, int out) : in_(in), out_(out) {}
  void send(char kind, const std::string& payload);
  int in_, out_;
  uint64_t seq_ = 0;  // of the request being answered
  FrameReader reader_;
};

// While it lives, tells the parent of this worker process that work of `kind` (kCompilingProgress
// or kHarnessWorkProgress) is under way, "<kind>: <what>", at once and then every
// kHeartbeatSeconds from a thread of its own, so that the watchdog waits (above). Where this
// process serves no request it does nothing and starts no thread.
class WorkHeartbeat {
 public:
  static constexpr double kHeartbeatSeconds = 0.25;  // well inside the shortest watchdog (1 s)
  WorkHeartbeat(const char* kind, const std::string& what);
  ~WorkHeartbeat();
  WorkHeartbeat(const WorkHeartbeat&) = delete;
  WorkHeartbeat& operator=(const WorkHeartbeat&) = delete;

 private:
  struct Beat;
  std::unique_ptr<Beat> beat_;
};

// The path of the running executable (/proc/self/exe).
std::string self_executable();

}  // namespace attnfuzz
