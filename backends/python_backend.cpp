#include "backends/python_backend.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>

#include "harness/errors.h"
#include "harness/isolated_call.h"
#include "harness/worker.h"
#include "backends/python_bridge_protocol.h"
#include "backends/shared_tensors.h"

#ifndef ATTNFUZZ_PYTHON_DEFAULT
#define ATTNFUZZ_PYTHON_DEFAULT "python3"
#endif
#ifndef ATTNFUZZ_PY_PACKAGE_DIR
#define ATTNFUZZ_PY_PACKAGE_DIR ""
#endif

namespace attnfuzz {
namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// A start-up error is one line (the CLI prints it as its refusal); the adapter's traceback is
// kept in a new file of TMPDIR (mkstemps: created, never followed or reused) that the line
// names. Empty when it cannot be written.
std::string keep_traceback(const std::string& who, const std::string& traceback) {
  std::string path = env_or("TMPDIR", "/tmp") + "/attnfuzz-python-startup-XXXXXX.log";
  const int fd = ::mkstemps(path.data(), 4);
  if (fd < 0) return "";
  const bool written = write_all(fd, who + "\n" + traceback + "\n");
  ::close(fd);
  return written ? path : "";
}

// Seconds one request may take (a first torch.compile included); start-up (imports) has its own.
// A watchdog setting outside [1 s, a day] is refused by name when the backend is made: `inf`
// never fires, and `1e-9` makes a correct adapter "hang during supports".
double seconds_from_env(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  const double t = std::strtod(v, &end);
  constexpr double kMin = 1, kMax = 86400;
  if (end != v + std::strlen(v) || errno == ERANGE || !(t >= kMin && t <= kMax))
    throw std::runtime_error(std::string(name) + "='" + message_safe(v, 60) + "': expected a number of seconds in [1, 86400]");
  return t;
}

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// execve does not search PATH: a bare name ("python3") is looked up here, as a shell would.
std::string resolve_program(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos) return name;
  const std::string path = env_or("PATH", "/usr/local/bin:/usr/bin:/bin");
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find(':', start), path.size());
    const std::string candidate = path.substr(start, end - start) + "/" + name;
    if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return name;  // not found: the start-up fails and says which interpreter it tried
}

// The interpreter runs a tiny bootstrap: the package directory first on sys.path (the user's
// PYTHONPATH and the current directory still follow, for their own adapters), then the worker.
std::vector<std::string> worker_argv(const AdapterSpec& spec, const std::string& shm_path) {
  const std::string python = resolve_program(env_or("ATTNFUZZ_PYTHON", ATTNFUZZ_PYTHON_DEFAULT));
  const std::string pkg = env_or("ATTNFUZZ_PY_PACKAGE_DIR", ATTNFUZZ_PY_PACKAGE_DIR);
  if (pkg.empty() || !is_dir(pkg + "/attnfuzz_py"))
    throw std::runtime_error("python backend 'py:" + spec.text + "': no attnfuzz_py package in '" + pkg +
                             "' (set ATTNFUZZ_PY_PACKAGE_DIR to the repository's python/ folder)");
  return {python, "-u",
          "-X",   "faulthandler",
          "-c",   "import sys; sys.path.insert(0, sys.argv[1]); from attnfuzz_py.worker import main; main(sys.argv[2:])",
          pkg,    shm_path};
}

class PythonBackend final : public Backend {
 public:
  explicit PythonBackend(AdapterSpec spec) : spec_(std::move(spec)) {
    worker_.emplace(worker_argv(spec_, arena_.path_for_peer()), std::vector<std::string>{});
    hello();
  }
  ~PythonBackend() override {
    if (stats_.count("compile_s") || stats_.count("fallbacks")) {
      std::string line;
      for (const auto& [k, v] : stats_) line += " " + k + "=" + std::to_string(v);
      std::fflush(stdout);  // after the results printed so far, not inside one of their lines
      std::fprintf(stderr, "%s: stats%s\n", name().c_str(), line.c_str());
    }
  }

  std::string name() const override { return "py." + info_.value("name", spec_.cls); }
  std::string version() const override { return info_.value("version", ""); }
  std::map<std::string, std::string> provenance() const override {
    std::map<std::string, std::string> out{
        {"spec", spec_.text}, {"module", spec_.module}, {"class", spec_.cls}, {"python", info_.value("python", "")}};
    if (const auto it = info_.find("libraries"); it != info_.end() && it->is_object())
      for (const auto& [lib, v] : it->items())
        if (v.is_string()) out[lib] = v.get<std::string>();
    return out;
  }
  Device device() const override { return device_; }
  // The adapter computes in its own Python process: its CUDA faults stay there.
  bool faults_reach_this_process() const override { return false; }
  std::optional<Contract> contract(DType d) const override {
    auto it = contracts_.find(d);
    return it == contracts_.end() ? std::nullopt : std::optional<Contract>(it->second);
  }
  SupportEnvelope envelope() const override { return envelope_; }
  std::string api() const override {
    const auto it = info_.find("api");
    return it != info_.end() && it->is_string() ? it->get<std::string>() : std::string();
  }
  bool masked_rows_zero() const override { return info_.value("masked_rows_zero", true); }
  bool returns_lse() const override { return info_.value("returns_lse", true); }
  bool backward_takes_dlse() const override { return info_.value("backward_takes_dlse", true); }
  // Absent from the hello of an older attnfuzz_py: no promise.
  bool batch_invariant() const override { return info_.value("batch_invariant", false); }
  bool mixes_batch_entries() const override { return info_.value("mixes_batch_entries", false); }
  std::vector<TensorId> nondeterministic_outputs() const override { return nondeterministic_; }
  std::string why_nondeterministic() const override {
    const std::string why = info_.value("why_nondeterministic", std::string());
    return why.empty() ? "the adapter's nondeterministic_outputs" : why;
  }

  std::optional<std::string> unsupported_reason(const Problem& p) const override {
    if (!contract(p.dtype)) return "dtype " + std::string(to_string(p.dtype)) + " not in the adapter's contract";
    if (auto why = envelope_.refusal(p)) return why;  // a dtype the declared envelope leaves out
    if (!info_.value("checks_support", true)) return std::nullopt;  // the base class's supports: a round trip saved
    const auto r = const_cast<PythonBackend*>(this)->call(request_payload(BridgeOp::supports, arena_.size(), p, nullptr), "supports");
    if (r.contains("reason") && r["reason"].is_string()) return r["reason"].get<std::string>();
    return std::nullopt;
  }

  Forward forward(const Problem& p) override {
    using R = TensorId;
    const ShmType dt = shm_type(p.dtype);
    ShmLayout mem(arena_);
    const ShmTensor q = mem.add(R::Q, place(p.layouts, R::Q, p.shape), dt);
    const ShmTensor k = mem.add(R::K, place(p.layouts, R::K, p.shape), dt);
    const ShmTensor v = mem.add(R::V, place(p.layouts, R::V, p.shape), dt);
    const ShmTensor o = mem.add(R::O, place(p.layouts, R::O, p.shape), dt);
    const ShmTensor lse = mem.add(R::LSE, place(p.layouts, R::LSE, p.shape), ShmType::f32);
    const ShmTensor mask = add_mask(mem, p);
    const std::optional<ShmTensor> bias = add_bias(mem, p);
    for (const ShmTensor* t : {&q, &k, &v}) shm_surround(arena_, *t, p.layouts.surround.fill);
    shm_store(arena_, q, p.q), shm_store(arena_, k, p.k), shm_store(arena_, v, p.v);
    shm_poison(arena_, o), shm_poison(arena_, lse);
    copy_mask(mask, p);
    if (bias) shm_store(arena_, *bias, p.bias);
    add_stats(call(request_payload(BridgeOp::forward, arena_.size(), p, &mem), "forward"));
    Forward f;
    f.o = shm_load(arena_, o, &f.unwritten[TensorId::O]);
    // Without returns_lse the LSE is not compared (harness/backend.h): not read back either.
    f.lse = returns_lse() ? shm_load(arena_, lse, &f.unwritten[TensorId::LSE]) : Tensor({p.shape.batch, p.shape.heads_q, p.shape.seq_q});
    return f;
  }

  Gradients backward(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse) override {
    using R = TensorId;
    const ShmType dt = shm_type(p.dtype);
    ShmLayout mem(arena_);
    const ShmTensor q = mem.add(R::Q, place(p.layouts, R::Q, p.shape), dt);
    const ShmTensor k = mem.add(R::K, place(p.layouts, R::K, p.shape), dt);
    const ShmTensor v = mem.add(R::V, place(p.layouts, R::V, p.shape), dt);
    const ShmTensor o = mem.add(R::O, place(p.layouts, R::O, p.shape), dt);
    const ShmTensor lse = mem.add(R::LSE, place(p.layouts, R::LSE, p.shape), ShmType::f32);
    // The forward's tensors first, in its order: at the forward's offsets, so the worker's views
    // of them (kept by their table entries) serve the backward too.
    const ShmTensor mask = add_mask(mem, p);
    const std::optional<ShmTensor> bias = add_bias(mem, p);
    const ShmTensor d_o = mem.add(R::dO, place(p.layouts, R::dO, p.shape), dt);
    std::optional<ShmTensor> g;  // dLSE, laid out as LSE; only for adapters that honour it (as in the C ABI)
    if (backward_takes_dlse()) g = mem.add(R::dLSE, place(p.layouts, R::LSE, p.shape), ShmType::f32);
    const ShmTensor dq = mem.add(R::dQ, place(p.layouts, R::dQ, p.shape), dt);
    const ShmTensor dk = mem.add(R::dK, place(p.layouts, R::dK, p.shape), dt);
    const ShmTensor dv = mem.add(R::dV, place(p.layouts, R::dV, p.shape), dt);
    // dBias, where the problem asks for it (only of an adapter whose envelope has bias_grad:
    // harness/envelope.h): dense in the bias's broadcast shape, as the bias comes.
    const std::optional<ShmTensor> dbias = p.bias_requires_grad ? add_bias(mem, p, R::dBias) : std::nullopt;
    for (const ShmTensor* t : {&q, &k, &v, &o, &lse, &d_o}) shm_surround(arena_, *t, p.layouts.surround.fill);
    if (g) shm_surround(arena_, *g, p.layouts.surround.fill);
    shm_store(arena_, q, p.q), shm_store(arena_, k, p.k), shm_store(arena_, v, p.v);
    shm_store(arena_, o, fwd.o), shm_store(arena_, lse, fwd.lse), shm_store(arena_, d_o, d_out);
    if (g) shm_store(arena_, *g, d_lse);
    shm_poison(arena_, dq), shm_poison(arena_, dk), shm_poison(arena_, dv);
    if (dbias) shm_poison(arena_, *dbias);
    copy_mask(mask, p);
    if (bias) shm_store(arena_, *bias, p.bias);
    add_stats(call(request_payload(BridgeOp::backward, arena_.size(), p, &mem), "backward"));
    Gradients out;
    out.dq = shm_load(arena_, dq, &out.unwritten[TensorId::dQ]);
    out.dk = shm_load(arena_, dk, &out.unwritten[TensorId::dK]);
    out.dv = shm_load(arena_, dv, &out.unwritten[TensorId::dV]);
    if (dbias) out.dbias = shm_load(arena_, *dbias, &out.unwritten[TensorId::dBias]);
    return out;
  }

 private:
  static ShmType shm_type(DType d) { return d == DType::f32 ? ShmType::f32 : d == DType::f16 ? ShmType::f16 : ShmType::bf16; }

  // The dense mask, [B][Hq][Sq][Skv] contiguous bytes (1 = visible).
  static ShmTensor add_mask(ShmLayout& mem, const Problem& p) {
    Placement pl;
    pl.ndim = 4;
    pl.sizes = {p.shape.batch, p.shape.heads_q, p.shape.seq_q, p.shape.seq_kv};
    pl.strides = {p.shape.heads_q * p.shape.seq_q * p.shape.seq_kv, p.shape.seq_q * p.shape.seq_kv, p.shape.seq_kv, 1};
    pl.extent = static_cast<int64_t>(p.mask.size());
    pl.buffer = TensorId::mask;
    return mem.add(TensorId::mask, pl, ShmType::u8);
  }
  // The score bias (or, as_tensor dBias, its gradient), where the call has one: dense in its
  // broadcast shape [B|1][Hq|1][Sq|1][Skv|1] (harness/case.h, ScoreBias), in the case dtype,
  // which holds the bias's values exactly.
  static std::optional<ShmTensor> add_bias(ShmLayout& mem, const Problem& p, TensorId as_tensor = TensorId::Bias) {
    if (!p.has_bias()) return std::nullopt;
    const auto& n = p.bias.shape;
    Placement pl;
    pl.ndim = 4;
    pl.sizes = {n.at(0), n.at(1), n.at(2), n.at(3)};
    pl.strides = {n[1] * n[2] * n[3], n[2] * n[3], n[3], 1};
    pl.extent = static_cast<int64_t>(p.bias.data.size());
    pl.buffer = layout_of(as_tensor);
    return mem.add(as_tensor, pl, shm_type(p.dtype));
  }
  void copy_mask(const ShmTensor& m, const Problem& p) {
    if (!p.mask.empty()) std::memcpy(arena_.at(m.buffer), p.mask.data(), p.mask.size());
  }

  void hello() {
    const auto r = exchange(hello_payload(spec_), "start-up", /*hello=*/true);
    const int theirs = r.value("protocol", -1);
    if (theirs != kPythonBridgeProtocol)
      throw std::runtime_error("python backend 'py:" + spec_.text + "': its attnfuzz_py speaks bridge protocol " + std::to_string(theirs) +
                               ", this attnfuzz speaks " + std::to_string(kPythonBridgeProtocol) +
                               " (use the python/ package of the same attnfuzz checkout)");
    // Refused at start-up, not met as a backend_error on every call.
    const nlohmann::json device = r.value("device", nlohmann::json("cpu"));
    const std::optional<Device> d = device.is_string() ? device_from_string(device.get<std::string>()) : std::nullopt;
    if (!d)
      throw std::runtime_error("python backend 'py:" + spec_.text + "': device " + message_safe(device.dump(), 80) +
                               ": attnfuzz knows \"cpu\" and \"cuda\"");
    device_ = *d;
    info_ = r;
    contracts_.clear();
    for (auto it = r["contracts"].begin(); it != r["contracts"].end(); ++it) {
      const auto c = contract_from_string(it.value().get<std::string>());
      if (!c) throw std::runtime_error("python backend 'py:" + spec_.text + "': unknown contract '" + it.value().get<std::string>() + "'");
      contracts_[dtype_from_string(it.key())] = *c;
    }
    std::vector<DType> contract_dtypes;
    for (const auto& [d, c] : contracts_) contract_dtypes.push_back(d);
    try {
      const auto declared = r.find("envelope");
      envelope_ = declared_envelope(declared != r.end() && !declared->is_null() ? &*declared : nullptr, contract_dtypes);
      envelope_.dlse = r.value("backward_takes_dlse", true);  // what the hello says, whatever the envelope declared
    } catch (const std::exception& e) {
      throw std::runtime_error("python backend 'py:" + spec_.text + "': envelope: " + e.what());
    }
    nondeterministic_.clear();
    for (const auto& t : r.value("nondeterministic_outputs", nlohmann::json::array())) {
      const auto o = t.is_string() ? output_from_name(t.get<std::string>()) : std::nullopt;
      if (!o) throw std::runtime_error("python backend 'py:" + spec_.text + "': nondeterministic_outputs: unknown output " + t.dump());
      nondeterministic_.push_back(*o);
    }
    hello_pid_ = worker_->pid();
  }

  // One request; a worker restarted after a crash is greeted again first.
  nlohmann::json call(const std::string& payload, const std::string& what) {
    if (worker_->pid() != hello_pid_) hello();
    return exchange(payload, what, false);
  }

  nlohmann::json exchange(const std::string& payload, const std::string& what, bool hello) {
    const std::string who = hello ? "python backend 'py:" + spec_.text + "'" : name();
    const auto reply = worker_->request(
        payload, hello ? seconds_from_env("ATTNFUZZ_PY_START_TIMEOUT_S", 300) : seconds_from_env("ATTNFUZZ_PY_TIMEOUT_S", 300));
    using S = WorkerProcess::Reply::Status;
    if (reply.status != S::ok) {
      std::string msg =
          who + ": the Python worker " + (reply.status == S::timed_out ? "hung" : "died") + " during " + what + " (" + reply.detail + ")";
      if (hello && reply.detail.find("status 127") != std::string::npos)
        msg += "; is the interpreter '" + env_or("ATTNFUZZ_PYTHON", ATTNFUZZ_PYTHON_DEFAULT) + "' there (ATTNFUZZ_PYTHON)?";
      throw std::runtime_error(msg);
    }
    if (reply.body.empty()) return nlohmann::json::object();  // ok, nothing to say: supported, or no stats
    nlohmann::json r;
    try {
      r = nlohmann::json::parse(reply.body);
    } catch (const std::exception& e) {
      throw std::runtime_error(who + ": malformed reply to " + what + ": " + e.what());
    }
    if (!r.value("ok", false)) {
      std::string msg = who + ": " + what + " failed in Python: " + r.value("error", std::string("no message"));
      const std::string tb = r.value("traceback", std::string());
      if (hello && !tb.empty()) {
        const std::string log = keep_traceback(msg, tb);
        if (!log.empty()) msg += " (traceback in " + log + ")";
      } else if (!tb.empty()) {
        msg += "\n" + tb;  // a failed call: the finding's detail keeps it
      }
      throw std::runtime_error(msg);
    }
    return r;
  }

  void add_stats(const nlohmann::json& r) {
    if (!r.contains("stats") || !r["stats"].is_object()) return;
    for (auto it = r["stats"].begin(); it != r["stats"].end(); ++it)
      if (it.value().is_number()) stats_[it.key()] += it.value().get<double>();
  }

  AdapterSpec spec_;
  SharedArena arena_;
  std::optional<WorkerProcess> worker_;
  pid_t hello_pid_ = -1;
  nlohmann::json info_;
  std::vector<TensorId> nondeterministic_;  // declared by the adapter (hello)
  std::map<DType, Contract> contracts_;
  Device device_ = Device::cpu;
  SupportEnvelope envelope_;  // what campaigns aim at: the adapter's declared envelope (hello)
  std::map<std::string, double> stats_;
};

}  // namespace

std::unique_ptr<Backend> make_python_backend(const std::string& spec) {
  const AdapterSpec parsed = parse_adapter_spec(spec);
  try {
    // Both watchdogs are read before the worker starts: a bad setting is refused up front.
    seconds_from_env("ATTNFUZZ_PY_START_TIMEOUT_S", 300);
    seconds_from_env("ATTNFUZZ_PY_TIMEOUT_S", 300);
    return std::make_unique<PythonBackend>(parsed);
  } catch (const std::runtime_error& e) {
    // A worker that cannot start, an adapter that cannot load, another protocol: the user's
    // backend name is wrong for this machine, as with a plugin that cannot load (exit 2).
    throw std::invalid_argument(e.what());
  }
}

}  // namespace attnfuzz
