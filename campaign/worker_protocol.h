#pragma once
// The worker protocol, both halves: the typed messages a campaign (or `replay`, or the
// isolated minimizer) exchanges with an isolated worker process, their encoding, the
// client's call and the server's loop. The bytes travel in frames (harness/worker_frame.h)
// over the pipes of harness/worker.h.
//
//   request  {"op": "probe"}                                  load every backend, say which
//            {"op": "run", "case": {...}, "determinism": b}   the differential of one case
//   reply    {"error"?: "...", "backends"?: [...], "profiles"?: [{"device", "envelope", "host_scores"}, ...],
//             "findings": [repro, ...], "runs": [...], "restart"?: true, "out_of_memory"?: true, "device_out_of_memory"?: true, "environment": {...}}
//
// A finding travels as the reproducer's JSON object (campaign/repro.h), encoded once.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "campaign/coverage.h"
#include "campaign/repro.h"
#include "harness/backend.h"
#include "harness/case.h"
#include "harness/oracle_set.h"
#include "harness/worker.h"

namespace attnfuzz {

struct WorkerRequest {
  enum class Op { probe, run } op = Op::run;
  Case c;                         // run: the case
  bool check_determinism = true;  // run: every backend twice, compared bitwise
};

// What the probe learns of a loaded backend: where it computes, what it accepts and what it
// keeps in host memory (Backend::host_scores; the memory estimate of the cases aimed at it).
struct BackendProfile {
  std::string name;
  Device device = Device::cpu;
  SupportEnvelope envelope;
  HostScores host_scores = HostScores::every_head;
  // Whether it returns the LSE (Backend::returns_lse): without it, no merged composition runs.
  bool returns_lse = true;
  bool on_gpu() const { return device != Device::cpu; }
};

struct WorkerReply {
  std::optional<std::string> error;      // the request could not be served (a backend did not load, a bad case)
  std::vector<std::string> backends;     // probe: the names the loaded backends report
  std::vector<BackendProfile> profiles;  // probe: one per backend, in the same order
  std::vector<Reproducer> findings;   // run
  std::vector<RunOutcome> runs;       // run: what ran, was skipped or errored
  bool restart = false;               // the GPU is unusable after this case: start a fresh worker
  bool out_of_memory = false;         // run: the worker ran out of host memory (error says so); nothing was judged
  bool device_out_of_memory = false;  // run: an oracle's device allocation failed (error says so); nothing was judged
  std::map<std::string, std::string> environment;
};

std::string encode(const WorkerRequest& r);
std::string encode(const WorkerReply& r);
// The reply's encoding, or, when that is over what one frame may carry (kMaxFramePayload:
// findings with huge cases, a backend's huge message), an error reply that says so: the
// reader drops a larger frame, and the call would look like a hang.
std::string encode_within_frame(const WorkerReply& r);
// Both throw std::runtime_error on a body that is not a well-formed message (an unknown op too).
WorkerRequest decode_request(const std::string& body);
WorkerReply decode_reply(const std::string& body);

// --- the client -------------------------------------------------------------------------

struct WorkerCall {
  WorkerProcess::Reply::Status status = WorkerProcess::Reply::Status::ok;
  bool malformed_reply = false;  // an intact frame whose body is no reply (status crashed)
  std::string detail;            // how the worker died, or why its reply was unreadable
  std::string last_progress;     // the backend it was running when it died
  WorkerReply reply;             // when status is ok
};
// Sends one request and waits at most timeout_s. An intact frame with a malformed body
// counts as a crash (the worker is restarted: its state is unknown).
WorkerCall call_worker(WorkerProcess& w, const WorkerRequest& req, double timeout_s);

// --- the server -------------------------------------------------------------------------

// What the worker needs from the layers above the pipeline (the CLI wires them up).
struct WorkerServices {
  std::function<std::unique_ptr<Backend>(const std::string& name)> make_backend;
  // The oracle set for a case through these backends (the GPU set for GPU backends, say).
  std::function<OracleSet(const std::vector<Backend*>& backends, const Case& c)> oracles;
  // What a run of the case through them keeps in host memory: the case is refused over the
  // memory budget for that, not for work that runs elsewhere. Unset: everything counts.
  std::function<HostWork(const std::vector<Backend*>& backends, const Case& c)> host_work;
  uint64_t memory_budget_bytes = Limits{}.memory_budget_bytes;
  std::function<std::map<std::string, std::string>()> environment;
  std::function<std::optional<std::string>()> gpu_health;
};

// Serves requests until the parent closes the pipe. The backends load when the first request
// arrives, so a plugin that crashes while loading is named in the reply to that request.
void serve_worker(WorkerChannel& channel, const std::vector<std::string>& backend_names, const WorkerServices& services);

}  // namespace attnfuzz
