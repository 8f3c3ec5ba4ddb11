#include "campaign/worker_protocol.h"

#include <new>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "harness/case_json.h"
#include "harness/differential.h"
#include "harness/worker_frame.h"

namespace attnfuzz {
using nlohmann::json;

namespace {
constexpr const char* kProbe = "probe";
constexpr const char* kRun = "run";

const char* host_scores_name(HostScores h) {
  switch (h) {
    case HostScores::none:
      return "none";
    case HostScores::one_head:
      return "one_head";
    case HostScores::every_head:
      return "every_head";
  }
  return "every_head";
}
// An older worker says nothing: everything counts.
HostScores host_scores_from(const json& profile) {
  const std::string n = profile.value("host_scores", std::string("every_head"));
  for (HostScores h : {HostScores::none, HostScores::one_head, HostScores::every_head})
    if (n == host_scores_name(h)) return h;
  throw std::runtime_error("profiles: unknown host_scores '" + n + "'");
}
}  // namespace

std::string encode(const WorkerRequest& r) {
  if (r.op == WorkerRequest::Op::probe) return json{{"op", kProbe}}.dump();
  return json{{"op", kRun}, {"case", to_json(r.c)}, {"determinism", r.check_determinism}}.dump();
}

WorkerRequest decode_request(const std::string& body) {
  try {
    const json j = json::parse(body);
    WorkerRequest r;
    const std::string op = j.at("op").get<std::string>();
    if (op == kProbe) {
      r.op = WorkerRequest::Op::probe;
      return r;
    }
    if (op != kRun) throw std::runtime_error("unknown op '" + op + "'");
    // Its memory is checked where it runs (serve_worker), for the work of the backends there.
    r.c = case_from_json(j.at("case"), kNoMemoryBudget);
    r.check_determinism = j.at("determinism").get<bool>();
    return r;
  } catch (const std::runtime_error&) {
    throw;
  } catch (const std::exception& e) {  // json errors, CaseError
    throw std::runtime_error(std::string("malformed worker request: ") + e.what());
  }
}

std::string encode(const WorkerReply& r) {
  json j;
  if (r.error) j["error"] = *r.error;
  if (!r.backends.empty()) j["backends"] = r.backends;
  if (!r.profiles.empty()) {
    j["profiles"] = json::array();
    for (const auto& b : r.profiles)
      j["profiles"].push_back(
          json{{"device", to_string(b.device)},
               {"envelope", to_json(b.envelope)},
               {"host_scores", host_scores_name(b.host_scores)},
               {"returns_lse", b.returns_lse}});
  }
  j["findings"] = json::array();
  for (const auto& f : r.findings) j["findings"].push_back(repro_to_json(f));
  j["runs"] = to_json(r.runs);
  if (r.restart) j["restart"] = true;
  if (r.out_of_memory) j["out_of_memory"] = true;
  if (r.device_out_of_memory) j["device_out_of_memory"] = true;
  j["environment"] = r.environment;
  return j.dump();
}

std::string encode_within_frame(const WorkerReply& r) {
  std::string body = encode(r);
  if (body.size() <= kMaxFramePayload) return body;
  WorkerReply small;
  small.error = "the worker's reply is " + std::to_string(body.size()) + " bytes, over the " + std::to_string(kMaxFramePayload) +
                " bytes one frame may carry (" + std::to_string(r.findings.size()) +
                " finding(s) with large cases, or a backend's huge message?); its findings are lost";
  small.environment = r.environment;
  return encode(small);
}

WorkerReply decode_reply(const std::string& body) {
  try {
    const json j = json::parse(body);
    if (!j.is_object() || !j.contains("findings") || !j.at("findings").is_array()) throw std::runtime_error("no findings array");
    WorkerReply r;
    if (j.contains("error")) r.error = j.at("error").get<std::string>();
    if (j.contains("backends")) r.backends = j.at("backends").get<std::vector<std::string>>();
    if (j.contains("profiles")) {
      const json& ps = j.at("profiles");
      if (!ps.is_array() || ps.size() != r.backends.size()) throw std::runtime_error("profiles: one per backend expected");
      for (size_t i = 0; i < ps.size(); ++i) {
        const std::optional<Device> device = device_from_string(ps[i].at("device").get<std::string>());
        if (!device) throw std::runtime_error("profiles: unknown device " + ps[i].at("device").dump());
        r.profiles.push_back({r.backends[i], *device, envelope_from_json(ps[i].at("envelope")), host_scores_from(ps[i]),
                              ps[i].value("returns_lse", true)});
      }
    }
    for (const auto& f : j.at("findings")) r.findings.push_back(repro_from_json(f));
    if (j.contains("runs")) r.runs = run_outcomes_from_json(j.at("runs"));
    r.restart = j.value("restart", false);
    r.out_of_memory = j.value("out_of_memory", false);
    r.device_out_of_memory = j.value("device_out_of_memory", false);
    if (j.contains("environment")) r.environment = j.at("environment").get<std::map<std::string, std::string>>();
    return r;
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("malformed reply: ") + e.what());
  }
}

WorkerCall call_worker(WorkerProcess& w, const WorkerRequest& req, double timeout_s) {
  const WorkerProcess::Reply raw = w.request(encode(req), timeout_s);
  WorkerCall call;
  call.status = raw.status;
  call.detail = raw.detail;
  call.last_progress = raw.last_progress;
  if (raw.status != WorkerProcess::Reply::Status::ok) return call;
  try {
    call.reply = decode_reply(raw.body);
  } catch (const std::exception& e) {
    call.status = WorkerProcess::Reply::Status::crashed;
    call.malformed_reply = true;
    call.detail = e.what();
    w.restart();
  }
  return call;
}

void serve_worker(WorkerChannel& channel, const std::vector<std::string>& backend_names, const WorkerServices& services) {
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> backends;
  std::optional<std::string> load_error;  // the first backend that cannot be loaded
  bool loaded = false;
  auto load_backends = [&] {
    for (const auto& n : backend_names) {
      channel.progress(n);  // a plugin that crashes while loading is named
      try {
        owned.push_back(services.make_backend(n));
        backends.push_back(owned.back().get());
      } catch (const std::exception& e) {
        if (!load_error) load_error = e.what();
      }
    }
  };
  std::string body;
  while (channel.next_request(body)) {
    if (!loaded) {
      load_backends();
      loaded = true;
    }
    WorkerReply reply;
    try {
      const WorkerRequest req = decode_request(body);
      if (req.op == WorkerRequest::Op::probe) {  // before any case: did everything load?
        reply.error = load_error;
        for (const Backend* b : backends) {
          reply.backends.push_back(b->name());
          reply.profiles.push_back({b->name(), b->device(), b->envelope(), b->host_scores(), b->returns_lse()});
        }
      } else {
        if (load_error) throw std::runtime_error(*load_error);
        check_memory_budget(req.c,
                            Limits{services.memory_budget_bytes, services.host_work ? services.host_work(backends, req.c) : HostWork{}});
        DiffOptions opt;
        opt.check_determinism = req.check_determinism;
        opt.gpu_health = services.gpu_health;
        opt.on_backend = [&channel](const std::string& b) { channel.progress(b); };
        const DiffReport r = run_differential(req.c, backends, services.oracles(backends, req.c), opt);
        for (const auto& f : r.findings) reply.findings.push_back(reproducer_of(req.c, backend_names, f, r, services.environment(), backend_sources(backends)));
        reply.runs = run_outcomes(r);
        reply.restart = r.gpu_error;  // the parent starts a fresh worker (DiffReport::gpu_error)
      }
    } catch (const std::bad_alloc&) {
      // This process's limit, not a backend's fault: never a finding (harness/differential.cpp).
      reply = WorkerReply{};
      reply.error = "out of host memory while judging the case (std::bad_alloc): its memory estimate was too low; nothing was judged";
      reply.out_of_memory = true;
    } catch (const std::exception& e) {
      reply = WorkerReply{};
      reply.error = e.what();
      // The device's limit: an oracle's CUDA allocation failing when the GPU is full (other
      // processes on it, a case past its budget). Not a finding either way.
      reply.device_out_of_memory = reply.error->find("out of memory") != std::string::npos;
    }
    reply.environment = services.environment();
    channel.reply(encode_within_frame(reply));
  }
}

}  // namespace attnfuzz
