#include "campaign/campaign.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "campaign/dir_lock.h"
#include "campaign/feature_cells.h"
#include "campaign/finding_store.h"
#include "campaign/minimize.h"
#include "campaign/output_file.h"
#include "campaign/run_dir.h"
#include "campaign/worker_protocol.h"
#include "harness/case_json.h"
#include "harness/errors.h"
#include "harness/inputs.h"
#include "harness/json_input.h"
#include "harness/rng.h"
#include "harness/worker.h"

namespace attnfuzz {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The most running time a state may record (about 30 000 years; --seconds is at most 1e9 a run).
constexpr double kMaxStateSeconds = 1e12;
// The campaign's copy of its --known set (KnownFindings::snapshot_json), named in state.json.
using rundir::kKnownSetFile;

void save_state(const CampaignOptions& o, uint64_t next_k, const Coverage& coverage, const std::map<std::string, uint64_t>& known,
                double seconds) {
  json j{{"format", rundir::kStateFormat},
         {"seed", o.seed},
         {"shard", o.shard},
         {"shards", o.shards},
         {"backends", o.backends},
         {"minimize", o.minimize},
         {"next_k", next_k},
         {"coverage", coverage.to_json(SIZE_MAX)},
         {"known", known},
         {"seconds", seconds}};  // for the report's rate (summary.json has no times: it is reproducible)
  // The known deviations themselves are in their own file, written once (known_path).
  if (!o.known.empty()) j["known_set"] = kKnownSetFile;
  if (!o.stream_flags.is_null()) j["stream"] = o.stream_flags;
  rundir::write_state(o.out_dir, j);
}

RecordedKnown known_of_state(const json& j, const std::string& out_dir) {
  RecordedKnown r;
  const auto set = j.find("known_set");
  if (set == j.end()) {
    const auto counts = j.find("known");
    r.counted_without_set = counts != j.end() && counts->is_object() && !counts->empty();
    return r;
  }
  if (!set->is_string() || set->get<std::string>() != kKnownSetFile)
    throw std::invalid_argument(std::string("known_set: expected \"") + kKnownSetFile + "\"");
  const std::string snapshot = rundir::known_set_path(out_dir);
  try {
    r.set = KnownFindings::from_snapshot(read_input_file(snapshot, kMaxKnownSetBytes));
  } catch (const std::exception& e) {
    throw std::runtime_error("--resume: " + snapshot + " (the campaign's --known deviations): " + e.what());
  }
  r.recorded = true;
  return r;
}

SavedCampaign saved_campaign_of(const json& j, const std::string& out_dir) {
  SavedCampaign s;
  s.seed = j.value("seed", uint64_t{0});
  s.shard = j.value("shard", -1);
  s.shards = j.value("shards", -1);
  if (j.contains("minimize")) {
    if (!j.at("minimize").is_boolean()) throw std::invalid_argument("minimize: expected true or false");
    s.minimize = j.at("minimize").get<bool>();
  }
  if (j.contains("stream")) {
    if (!j.at("stream").is_object()) throw std::invalid_argument("stream: expected an object of the case stream's flags");
    s.stream_flags = j.at("stream");
  }
  if (j.contains("backends")) {
    try {
      s.backends = j.at("backends").get<std::vector<std::string>>();
    } catch (const json::exception& e) {
      throw std::invalid_argument(std::string("backends: ") + e.what());
    }
  }
  // Range-checked, never wrapped: a next_k of -5 would resume at case 2^64 - 5.
  s.next_k = count_at(j, "next_k", "");
  if (j.contains("seconds")) {
    const json& secs = j.at("seconds");
    if (!secs.is_number() || !(secs.get<double>() >= 0 && secs.get<double>() <= kMaxStateSeconds))
      throw std::invalid_argument("seconds: expected the campaign's running time, in [0, 1e12], got " + message_safe(secs.dump(), 60));
    s.seconds = secs.get<double>();
  }
  if (j.contains("coverage")) s.coverage = Coverage::from_json(j.at("coverage"));
  if (j.contains("known")) {
    if (!j.at("known").is_object()) throw std::invalid_argument("known: expected an object of counts");
    for (const auto& [id, n] : j.at("known").items()) s.known_counts[id] = count_at(j.at("known"), id, "known");
  }
  s.known = known_of_state(j, out_dir);
  return s;
}

// The campaign continues the state the CLI read (o.resume): the same seed, shard and backends,
// and the file unchanged since (another campaign could have finished there before our lock).
void check_resumable(const CampaignOptions& o) {
  const SavedCampaign& s = *o.resume;
  const std::string path = rundir::state_path(o.out_dir);
  if (s.seed != o.seed || s.shard != o.shard || s.shards != o.shards)
    throw std::runtime_error("--resume: " + path + " belongs to another campaign (seed/shard differ)");
  // The findings store deduplicates per backend: another set of backends is another campaign.
  if (s.backends && *s.backends != o.backends)
    throw std::runtime_error("--resume: " + path + " was run with --backends " + json(*s.backends).dump() +
                             ": resume without --backends, or use another --out");
  std::string now;
  try {
    now = read_input_file(path);
  } catch (const std::exception& e) {
    throw std::runtime_error("--resume: " + path + ": " + e.what());
  }
  if (now != s.bytes) throw std::runtime_error("--resume: " + path + " changed since it was read (another campaign ran there): run again");
}

// The environment of the last worker reply (a dead worker cannot report its own).
std::map<std::string, std::string> last_environment;
std::mutex last_environment_m;

Reproducer death_finding(const Case& c, const WorkerCall& reply, int64_t index, const std::vector<std::string>& backends) {
  std::map<std::string, std::string> environment;
  {
    std::lock_guard<std::mutex> lock(last_environment_m);
    environment = last_environment;
  }
  Reproducer r;
  r.c = c;
  r.backends = portable_backend_names(backends);
  r.backend_sources = plugin_file_sources(backends);
  r.case_index = index;
  Signature& s = r.finding.signature;
  s.backend = reply.last_progress.empty() ? "worker" : reply.last_progress;
  s.composition = CompositionClass::none;
  s.cls = reply.status == WorkerProcess::Reply::Status::timed_out ? FindingClass::timeout : FindingClass::crash;
  // A death has no tensor or composition; the mask is left out too, so one crash site
  // is one finding per dtype rather than one per mask the stream happens to hit.
  s.dtype = c.dtype;
  s.mask = Signature::kAnyMask;
  r.finding.detail = reply.detail;
  r.environment = environment;
  // The worker died before it could report the inputs' checksum: the same regeneration here.
  r.input_checksum = checksum(generate_inputs(c));
  return r;
}

// A guided campaign's state beside the stream (campaign.h, "Guided campaigns"): the corpus, the
// judged cases per backend and feature cell that steering reads, and when the corpus was saved.
// Shared by the workers, under its own lock.
class Guidance {
 public:
  Guidance(const CampaignOptions& o, const std::vector<BackendProfile>& profiles, const Coverage& saved)
      : o_(o), profiles_(profiles), guide_(o.guide(profiles)) {
    for (const auto& [backend, cells] : saved.cells()) cells_[backend] = cells;
    if (o.resume) {
      try {
        if (auto c = rundir::read_corpus(o.out_dir)) corpus_ = std::move(*c);
      } catch (const std::exception& e) {
        throw std::runtime_error(std::string("--resume: ") + e.what());
      }
    }
  }

  // What a draw of case g was: its parent's slot and ratio when it is a mutant.
  struct Drawn {
    AimedCase aimed;
    std::optional<CorpusParent> parent;
    bool built_for_cell = false;  // steering built it for a thin feature cell
  };

  Drawn draw(uint64_t g, const std::function<AimedCase(uint64_t)>& make_case) {
    const uint64_t h = splitmix64(o_.seed ^ splitmix64(g ^ 0x6775696465642d31ull));
    if (unit(h) < o_.mutation_share) {
      std::optional<CorpusParent> parent;
      {
        std::lock_guard<std::mutex> lock(m_);
        parent = corpus_.pick(splitmix64(h + 1));
      }
      if (parent)
        if (std::optional<AimedCase> mutant = guide_.mutate(parent->entry.c, parent->slot.backend, splitmix64(h + 2))) {
          const double w = work_of(mutant->c), mean = mean_fresh_work();
          if (w <= mean || unit(splitmix64(h + 4)) < mean / w) return {std::move(*mutant), std::move(parent)};
        }
    }
    AimedCase best = make_case(g);
    double best_work = work_of(best.c);
    std::lock_guard<std::mutex> lock(m_);
    fresh_work_ += best_work;
    ++fresh_draws_;
    if (unit(splitmix64(h + 3)) >= kSteerShare) return {std::move(best), std::nullopt};
    const double most = std::max(best_work, fresh_work_ / static_cast<double>(fresh_draws_));
    uint64_t fewest = draw_load(best);
    if (const std::optional<ThinCell> thin = thinnest_cell(best); thin && thin->load < fewest && guide_.in_cell) {
      // Every try counts toward the cell's load, kept or not; a cell no case came for (a head dim
      // above the stream's largest, say) is not tried again.
      const std::string cell = to_string(thin->cell);
      ++built_[thin->backend][cell];
      if (std::optional<AimedCase> built = guide_.in_cell(best.c, thin->backend, thin->cell, splitmix64(h + 5))) {
        if (work_of(built->c) <= most) return {std::move(*built), std::nullopt, true};
      } else {
        unreachable_[thin->backend].insert(cell);
      }
    }
    for (int d = 1; d < kSteerDraws && fewest > 0; ++d) {
      AimedCase other = guide_.redraw(g, static_cast<uint64_t>(d));
      const double w = work_of(other.c);
      if (w > most) continue;
      if (const uint64_t n = draw_load(other); n < fewest) {
        fewest = n;
        best = std::move(other);
        best_work = w;
      }
    }
    return {std::move(best), std::nullopt};
  }

  // A judged case: into the corpus, its cells counted, its raise counted if it is a mutant.
  void judged(const Drawn& d, uint64_t g, const std::vector<RunOutcome>& runs, const Coverage& case_coverage) {
    const std::map<CorpusSlot, double> ratios = slot_ratios(runs);
    std::lock_guard<std::mutex> lock(m_);
    for (const auto& [backend, cells] : case_coverage.cells())
      for (const auto& [cell, n] : cells) cells_[backend][cell] += n;
    if (d.built_for_cell) {
      ++corpus_.counts.steered;
      dirty_ = true;
    }
    if (d.parent) {
      ++corpus_.counts.mutants;
      const auto r = ratios.find(d.parent->slot);
      if (r != ratios.end() && r->second > d.parent->entry.ratio) ++corpus_.counts.raised;
    }
    dirty_ = corpus_.offer(d.aimed.c, static_cast<int64_t>(g), ratios) || d.parent || dirty_;
  }

  // Writes corpus.json when it changed, at most every kCorpusSaveSeconds unless `now`.
  void save(double seconds, bool now) {
    std::lock_guard<std::mutex> lock(m_);
    if (!dirty_ || (!now && seconds - saved_at_ < kCorpusSaveSeconds)) return;
    rundir::write_corpus(o_.out_dir, corpus_);
    dirty_ = false;
    saved_at_ = seconds;
  }

  GuidedCounts counts() const {
    std::lock_guard<std::mutex> lock(m_);
    return corpus_.counts;
  }
  size_t entries() const {
    std::lock_guard<std::mutex> lock(m_);
    return corpus_.entries();
  }

 private:
  static double unit(uint64_t h) { return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0); }
  static double work_of(const Case& c) { return static_cast<double>(composition_cost(c, c.composition).work); }
  // W of campaign.h, "Guided campaigns": before the first fresh draw, any mutant is kept.
  double mean_fresh_work() const {
    std::lock_guard<std::mutex> lock(m_);
    return fresh_draws_ ? fresh_work_ / static_cast<double>(fresh_draws_) : std::numeric_limits<double>::infinity();
  }

  static uint64_t count_in(const std::map<std::string, std::map<std::string, uint64_t>>& m, const std::string& backend,
                           const std::string& cell) {
    const auto b = m.find(backend);
    if (b == m.end()) return 0;
    const auto it = b->second.find(cell);
    return it == b->second.end() ? 0 : it->second;
  }
  // A cell's load for a backend (campaign.h, "Guided campaigns"): its judged cases or the cases
  // built for it, whichever is more.
  uint64_t load(const std::string& backend, const std::string& cell) const {
    return std::max(count_in(cells_, backend, cell), count_in(built_, backend, cell));
  }

  // The least load of the draw's cell among the backends that would run it.
  uint64_t draw_load(const AimedCase& a) const {
    const std::string cell = cell_of(a.c);
    uint64_t fewest = UINT64_MAX;
    for (const BackendProfile& b : profiles_) {
      if ((!a.target.empty() && a.target != b.name) || cell_outside(b.envelope, b.returns_lse, cell)) continue;
      fewest = std::min(fewest, load(b.name, cell));
    }
    return fewest;
  }

  struct ThinCell {
    std::string backend;
    FeatureCell cell;
    uint64_t load = 0;
  };
  // The cell of least load inside the envelope of the draw's target (of any backend for a blind draw).
  std::optional<ThinCell> thinnest_cell(const AimedCase& a) const {
    std::optional<ThinCell> thin;
    for (const BackendProfile& b : profiles_) {
      if (!a.target.empty() && a.target != b.name) continue;
      const auto unreachable = unreachable_.find(b.name);
      for (const FeatureCell& cell : all_feature_cells()) {
        if (cell_outside(b.envelope, b.returns_lse, cell)) continue;
        const std::string name = to_string(cell);
        if (unreachable != unreachable_.end() && unreachable->second.count(name)) continue;
        const uint64_t n = load(b.name, name);
        if (!thin || n < thin->load) thin = ThinCell{b.name, cell, n};
      }
    }
    return thin;
  }

  const CampaignOptions& o_;
  const std::vector<BackendProfile>& profiles_;
  const CaseGuide guide_;
  mutable std::mutex m_;
  GuidedCorpus corpus_;
  std::map<std::string, std::map<std::string, uint64_t>> cells_;
  std::map<std::string, std::map<std::string, uint64_t>> built_;  // steered tries to build a case, per backend and cell
  std::map<std::string, std::set<std::string>> unreachable_;       // cells a try got no case for, per backend
  bool dirty_ = false;
  double saved_at_ = 0;
  double fresh_work_ = 0;  // the fresh draws' work, summed, and their count (mean_fresh_work)
  uint64_t fresh_draws_ = 0;
};

// The compilers' on-disk caches, one per campaign directory, for every Python worker of the
// campaign: a kernel one worker compiled loads in the others, and in a --resume or the next
// `check` in the same --out. A variable the user set is theirs.
std::vector<std::string> compile_cache_env(const std::string& out_dir) {
  const std::string cache = fs::absolute(rundir::compile_cache_dir(out_dir)).string();
  std::vector<std::string> env;
  for (const auto& [var, sub] : {std::pair<const char*, const char*>{"TORCHINDUCTOR_CACHE_DIR", "inductor"},
                                 {"TRITON_CACHE_DIR", "triton"},
                                 {"JAX_COMPILATION_CACHE_DIR", "jax"}})
    if (!std::getenv(var)) env.push_back(std::string(var) + "=" + cache + "/" + sub);
  return env;
}

std::vector<std::string> worker_env(const CampaignOptions& o, size_t worker) {
  std::vector<std::string> env = compile_cache_env(o.out_dir);
  if (o.devices.empty()) return env;
  // Synchronous launches: a kernel fault is raised by the call that launched it, so the
  // finding names the right backend (the cases are small; the cost is small too).
  env.push_back("CUDA_VISIBLE_DEVICES=" + o.devices[worker % o.devices.size()]);
  env.push_back("CUDA_LAUNCH_BLOCKING=1");
  return env;
}

}  // namespace

double case_watchdog_seconds(const Case& c, bool check_determinism, const CampaignOptions& o) {
  const double work = static_cast<double>(composition_cost(c, c.composition).work), runs = check_determinism ? 2 : 1;
  double growth = 0;
  for (Device d : o.backend_devices) growth += runs * work / (d == Device::cpu ? kSlowCpuWorkPerSecond : kSlowGpuWorkPerSecond);
  return o.timeout_seconds + std::min(growth, watchdog_growth_limit_seconds());
}

// One request to a worker: the findings of a case, or the crash/timeout it caused.
std::vector<Reproducer> run_case(WorkerProcess& w, const Case& c, int64_t index, bool check_determinism, const CampaignOptions& o,
                                 Coverage* coverage, bool* abandoned, bool* out_of_memory, std::vector<RunOutcome>* runs,
                                 bool* device_out_of_memory) {
  WorkerRequest req;
  req.c = c;
  req.check_determinism = check_determinism;
  const double watchdog = case_watchdog_seconds(c, check_determinism, o);
  WorkerCall call = call_worker(w, req, watchdog);
  if (call.status == WorkerProcess::Reply::Status::timed_out && o.confirm_timeout_factor > 1) {
    WorkerProcess solo(o.worker_argv, worker_env(o, static_cast<size_t>(std::max<int64_t>(index, 0))));
    solo.abandon_when(w.abandon_flag());
    WorkerCall again = call_worker(solo, req, o.confirm_timeout_factor * watchdog);
    if (again.status != WorkerProcess::Reply::Status::timed_out) call = std::move(again);  // slow, not hung (or abandoned)
  }
  if (call.status == WorkerProcess::Reply::Status::abandoned) {
    if (abandoned) *abandoned = true;
    return {};
  }
  // A dead worker (or one whose reply was unreadable): a crash/timeout finding, and the
  // backend it was running counted as errored.
  if (call.status != WorkerProcess::Reply::Status::ok) {
    Reproducer d = death_finding(c, call, index, o.backends);
    if (coverage) {
      const std::string why = to_string(d.finding.signature.cls) + ": " + call.detail;
      if (call.last_progress.empty())
        coverage->add_case_error("the worker died before running any backend: " + why);
      else
        coverage->add_case({{call.last_progress, CompositionClass::none, Outcome::errored, why}}, /*died=*/true);
    }
    return {d};
  }
  const WorkerReply& reply = call.reply;
  if (reply.out_of_memory && out_of_memory) *out_of_memory = true;
  if (reply.device_out_of_memory && device_out_of_memory) *device_out_of_memory = true;
  if (runs && !reply.error) *runs = reply.runs;
  if (coverage) {
    if (reply.error)
      coverage->add_case_error(*reply.error);
    else
      coverage->add_case(reply.runs);
  }
  if (reply.restart) w.restart();
  if (!reply.environment.empty()) {
    std::lock_guard<std::mutex> lock(last_environment_m);
    last_environment = reply.environment;
  }
  std::vector<Reproducer> out = reply.findings;
  for (auto& r : out) {
    r.case_index = index;
    r.backends = portable_backend_names(o.backends);
  }
  return out;
}

Judge isolated_judge(WorkerProcess& w, const CampaignOptions& o, bool check_determinism, double timeout_seconds) {
  // The options with this watchdog, copied once: a minimization judges thousands of candidates.
  auto options = std::make_shared<CampaignOptions>(o);
  options->timeout_seconds = timeout_seconds;
  return [&w, options, check_determinism](const Case& c) {
    std::vector<Finding> out;
    for (const auto& r : run_case(w, c, -1, check_determinism, *options)) out.push_back(r.finding);
    return out;
  };
}

Reproducer minimize_isolated(WorkerProcess& proc, const Reproducer& r, const CampaignOptions& o, ShrinkReport* report,
                             const OutOfTime& out_of_time) {
  const Signature& sig = r.finding.signature;
  // A hang costs the whole watchdog on every candidate that still hangs: a short one.
  const double timeout = sig.cls == FindingClass::timeout ? std::min(o.timeout_seconds, 2.0) : o.timeout_seconds;
  Reproducer m = minimize(r, isolated_judge(proc, o, needs_determinism(sig), timeout), o.candidates, o.size, report, out_of_time);
  m.case_index = r.case_index;
  return m;
}

namespace {

// `judged` of this invocation's `cases`: the rate counts judged cases only (campaign/coverage.h).
std::string rate_line(uint64_t cases, uint64_t judged, double secs, const CampaignOptions& o, uint64_t next_k,
                      const std::map<std::string, int>& by_class, const Coverage& coverage) {
  char left[64];
  if (o.budget_cases)  // a count budget (check): what is left is cases
    std::snprintf(left, sizeof left, "%llu cases left",
                  static_cast<unsigned long long>(o.budget_cases > next_k ? o.budget_cases - next_k : 0));
  else
    std::snprintf(left, sizeof left, "%.0f s left", std::max(0.0, o.budget_seconds - secs));
  judged = std::min(judged, cases);  // a worker's case counted before `done` was: never more judged than done
  char buf[320];
  std::snprintf(buf, sizeof buf, "%llu cases (%llu judged, %llu unjudged), %.1f judged cases/s, %.0f s elapsed, %s, findings:",
                static_cast<unsigned long long>(cases), static_cast<unsigned long long>(judged),
                static_cast<unsigned long long>(cases - judged), secs > 0 ? static_cast<double>(judged) / secs : 0.0, secs, left);
  std::string s = buf;
  if (by_class.empty()) s += " none";
  for (const auto& [k, v] : by_class) s += " " + k + "=" + std::to_string(v);
  s += "; ran/skipped/errored: " + coverage.progress_text();
  return s;
}

}  // namespace

SavedCampaign read_saved_campaign(const std::string& out_dir) {
  const std::string path = rundir::state_path(out_dir);
  if (!fs::exists(path))
    throw std::runtime_error("--resume: " + out_dir + " holds no campaign to continue (no state.json): run without --resume");
  const rundir::StateFile state = rundir::read_state(out_dir);
  try {
    SavedCampaign s = saved_campaign_of(state.json, out_dir);
    s.bytes = state.bytes;
    return s;
  } catch (const json::exception& e) {
    throw std::runtime_error("--resume: " + path + ": " + e.what());
  } catch (const std::invalid_argument& e) {  // a count out of range, a coverage outcome it does not know
    throw std::runtime_error("--resume: " + path + ": " + e.what());
  }
}

std::vector<BackendProfile> probe_backends(const CampaignOptions& o) {
  WorkerProcess proc(o.worker_argv, worker_env(o, 0));
  return probe_backends(proc, o);
}

std::vector<BackendProfile> probe_backends(WorkerProcess& proc, const CampaignOptions& o) {
  auto one_line = [](std::string m) {
    std::replace(m.begin(), m.end(), '\n', ' ');
    return m;
  };
  WorkerRequest probe;
  probe.op = WorkerRequest::Op::probe;
  const WorkerCall call = call_worker(proc, probe, std::max(60.0, 2 * o.timeout_seconds));
  if (call.malformed_reply) throw BackendLoadError(one_line("loading the backends: " + call.detail));
  if (call.status != WorkerProcess::Reply::Status::ok)
    throw BackendLoadError(
        one_line("loading " + (call.last_progress.empty() ? std::string("the backends") : call.last_progress) +
                 (call.status == WorkerProcess::Reply::Status::timed_out ? " hung" : " killed the worker: " + call.detail)));
  if (call.reply.error) throw BackendLoadError(one_line(*call.reply.error));
  if (call.reply.profiles.size() != call.reply.backends.size())
    throw BackendLoadError("loading the backends: the worker described " + std::to_string(call.reply.profiles.size()) + " of " +
                           std::to_string(call.reply.backends.size()));
  return call.reply.profiles;
}

CampaignSummary run_campaign(const CampaignOptions& o) {
  if (o.shards < 1 || o.shard < 0 || o.shard >= o.shards) throw std::invalid_argument("--shard i/N needs 0 <= i < N");
  // Every backend must load before anything is written or any case runs: a campaign
  // against a backend that cannot even load would otherwise report a clean run.
  const std::vector<BackendProfile> profiles = probe_backends(o);
  std::vector<std::string> backend_names;
  for (const auto& b : profiles) backend_names.push_back(b.name);
  const std::function<AimedCase(uint64_t)> make_case = o.case_stream(profiles);
  CampaignOptions per_case = o;  // what run_case sees: timeouts confirmed where a backend runs on a GPU
  per_case.backend_devices.clear();
  for (const auto& b : profiles) per_case.backend_devices.push_back(b.device);
  if (per_case.confirm_timeout_factor == 0 &&
      std::any_of(profiles.begin(), profiles.end(), [](const BackendProfile& b) { return b.on_gpu(); }))
    per_case.confirm_timeout_factor = kGpuConfirmTimeoutFactor;
  {
    std::error_code ec;
    fs::create_directories(o.out_dir, ec);
    if (ec) throw std::runtime_error("--out " + o.out_dir + ": cannot create the directory: " + ec.message());
    if (!fs::is_directory(o.out_dir, ec)) throw std::runtime_error("--out " + o.out_dir + ": not a directory");
  }
  const DirLock lock(o.out_dir);  // held until the summary is written: one campaign per directory
  if (o.resume) check_resumable(o);
  const SavedCampaign saved = o.resume ? *o.resume : SavedCampaign{};
  if (!o.resume && fs::exists(rundir::state_path(o.out_dir)))
    throw std::runtime_error(o.out_dir + " holds a campaign already: use --resume, or another --out");
  FindingStore store(rundir::findings_dir(o.out_dir));
  // The known deviations go with the campaign's state: a --resume counts what this run counts.
  if (!o.known.empty()) {
    const std::string snapshot = o.known.snapshot_json();
    if (snapshot.size() > kMaxKnownSetBytes)
      throw std::runtime_error("--known: the " + std::to_string(o.known.all().size()) + " known deviations are " +
                               std::to_string(snapshot.size() >> 20) + " MiB together, over the " +
                               std::to_string(kMaxKnownSetBytes >> 20) + " MiB a campaign can record and resume (" + kKnownSetFile + ")");
    rundir::write(rundir::known_set_path(o.out_dir), snapshot);
  }

  std::atomic<uint64_t> next_k{saved.next_k};
  std::atomic<uint64_t> done{0};
  std::mutex flight_m;
  std::set<uint64_t> in_flight;
  // Coverage of the completed prefix of the stream (what state.json records, so a resume
  // counts every case once), and of the cases completed beyond it.
  Coverage prefix_coverage = saved.coverage;
  for (const auto& b : backend_names) prefix_coverage.add_backend(b);
  for (const auto& b : profiles) prefix_coverage.set_outside_cells(b.name, b.envelope, b.returns_lse);
  std::map<uint64_t, Coverage> pending_coverage;
  // A guided campaign's corpus and steering (nothing for a blind one: its stream is case_stream's).
  std::optional<Guidance> guidance;
  if (o.mutation_share > 0 && o.guide) guidance.emplace(o, profiles, saved.coverage);
  // The same for findings a known deviation covers (--known), per deviation id.
  std::map<std::string, uint64_t> prefix_known = saved.known_counts;
  std::map<uint64_t, std::map<std::string, uint64_t>> pending_known;
  std::atomic<bool> stop{false};
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  auto completed_prefix = [&] {
    std::lock_guard<std::mutex> lock(flight_m);
    return in_flight.empty() ? next_k.load() : *in_flight.begin();
  };
  // Folds the completed cases below the prefix into prefix_coverage; returns the total.
  auto coverage_now = [&](uint64_t prefix) {
    std::lock_guard<std::mutex> lock(flight_m);
    while (!pending_coverage.empty() && pending_coverage.begin()->first < prefix) {
      prefix_coverage.add(pending_coverage.begin()->second);
      pending_coverage.erase(pending_coverage.begin());
    }
    while (!pending_known.empty() && pending_known.begin()->first < prefix) {
      for (const auto& [id, n] : pending_known.begin()->second) prefix_known[id] += n;
      pending_known.erase(pending_known.begin());
    }
    Coverage total = prefix_coverage;
    for (const auto& [k, c] : pending_coverage) total.add(c);
    return total;
  };
  auto checkpoint = [&] {
    const uint64_t prefix = completed_prefix();
    Coverage total = coverage_now(prefix);
    std::map<std::string, uint64_t> known;
    {
      std::lock_guard<std::mutex> lock(flight_m);
      known = prefix_known;
    }
    save_state(o, prefix, prefix_coverage, known, saved.seconds + elapsed());
    if (guidance) guidance->save(elapsed(), false);
    return total;
  };
  checkpoint();

  const size_t workers = std::max<size_t>(static_cast<size_t>(std::max(o.jobs, 1)), o.devices.size());
  std::vector<std::thread> threads;
  std::mutex error_m;
  std::string worker_error;
  // Raised when the campaign ends: the cases still in flight are abandoned, their workers
  // killed, instead of holding the end of a campaign for up to a watchdog's --timeout each (a
  // real-size case on the H200 held a 150 s campaign to 220 s). They are not judged and stay
  // past the completed prefix, so --resume runs them, as after a SIGKILL.
  std::atomic<bool> abandon{false};
  std::atomic<uint64_t> abandoned_cases{0};
  for (size_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      try {
        WorkerProcess proc(o.worker_argv, worker_env(o, w));
        proc.abandon_when(&abandon);
        int memory_wait_ms = 50;
        while (!stop) {
          if (elapsed() >= o.budget_seconds) break;
          uint64_t k;
          {
            std::lock_guard<std::mutex> lock(flight_m);
            k = next_k.load();
            if (o.budget_cases && k >= o.budget_cases) break;
            next_k = k + 1;
            in_flight.insert(k);
          }
          const uint64_t g = global_case_index(k, o.shard, o.shards);
          const Guidance::Drawn drawn = guidance ? guidance->draw(g, make_case) : Guidance::Drawn{make_case(g), std::nullopt};
          const AimedCase& aimed = drawn.aimed;
          const Case& c = aimed.c;
          Coverage case_coverage;
          // Determinism (every backend twice) is checked on a sample of the stream: it doubles
          // the cost of a case, and a nondeterministic backend shows up on any sizable sample.
          const bool determinism = o.determinism_every <= 1 || g % static_cast<uint64_t>(o.determinism_every) == 0;
          std::map<std::string, uint64_t> case_known;
          bool abandoned = false, host_short = false, device_short = false;
          std::vector<RunOutcome> runs;
          const std::vector<Reproducer> found = run_case(proc, c, static_cast<int64_t>(g), determinism, per_case, &case_coverage,
                                                         &abandoned, &host_short, &runs, &device_short);
          if (abandoned) {
            ++abandoned_cases;
            break;  // left in flight: not part of the completed prefix
          }
          // A case left unjudged for want of memory: the next one would meet the same wall at
          // once (a campaign sharing its GPU with another spun through 443 820 unjudged cases in
          // 300 s), so the worker waits before it, longer each time in a row (50 ms, doubling
          // up to 2 s), and the memory may come back.
          if (host_short || device_short) {
            std::this_thread::sleep_for(std::chrono::milliseconds(memory_wait_ms));
            memory_wait_ms = std::min(2 * memory_wait_ms, 2000);
          } else {
            memory_wait_ms = 50;
          }
          for (const auto& r : found) {
            if (const KnownDeviation* known = o.known.covering(r))
              ++case_known[known->id];
            else
              store.record(r);
          }
          case_coverage.add_aim(aimed);
          case_coverage.add_values(c);
          case_coverage.add_features(c, runs);
          if (guidance) guidance->judged(drawn, g, runs, case_coverage);
          {
            std::lock_guard<std::mutex> lock(flight_m);
            pending_coverage[k] = std::move(case_coverage);
            if (!case_known.empty()) pending_known[k] = std::move(case_known);
            in_flight.erase(k);
          }
          ++done;
        }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(error_m);
        if (worker_error.empty()) worker_error = e.what();
        stop = true;
      }
    });

  // Progress: a rewritten line on a terminal, plain lines every 5 s otherwise; the state
  // file follows the completed prefix of the case stream.
  const bool tty = ::isatty(2);
  double last_line = 0;
  std::vector<std::pair<double, uint64_t>> judged_at;  // (seconds, judged so far): the steady rate
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    Coverage coverage;
    try {
      coverage = checkpoint();
    } catch (const std::exception& e) {  // disk full, say: stop the workers before reporting it
      {
        std::lock_guard<std::mutex> lock(error_m);
        if (worker_error.empty()) worker_error = e.what();
      }
      stop = true;
      coverage = coverage_now(completed_prefix());
    }
    const double secs = elapsed();
    judged_at.emplace_back(secs, coverage.judged_cases() - saved.coverage.judged_cases());
    const bool finished =
        (o.budget_cases && next_k.load() >= o.budget_cases && completed_prefix() >= o.budget_cases) || secs >= o.budget_seconds || stop;
    if (!o.quiet && (tty || secs - last_line >= 5.0)) {
      const std::string line =
          rate_line(done.load(), coverage.judged_cases() - saved.coverage.judged_cases(), secs, o, next_k.load(), store.by_class(), coverage);
      std::fprintf(stderr, tty ? "\r\033[K%s" : "%s\n", line.c_str());
      last_line = secs;
    }
    if (finished) break;
  }
  stop = true;
  abandon = true;
  for (auto& t : threads) t.join();
  if (!o.quiet && abandoned_cases > 0)
    std::fprintf(stderr, "%s%llu case(s) in flight at the end were abandoned, not judged (--resume runs them)\n", tty ? "\r\033[K" : "",
                 static_cast<unsigned long long>(abandoned_cases.load()));
  if (!worker_error.empty()) throw std::runtime_error(worker_error);
  CampaignSummary s;
  s.coverage = checkpoint();
  if (guidance) {
    guidance->save(elapsed(), true);
    s.guided = guidance->counts();
    s.corpus_entries = guidance->entries();
  }
  if (!o.quiet)
    std::fprintf(stderr, tty ? "\r\033[K%s\n" : "%s\n",
                 rate_line(done.load(), s.coverage.judged_cases() - saved.coverage.judged_cases(), elapsed(), o, next_k.load(),
                           store.by_class(), s.coverage)
                     .c_str());

  s.cases = done.load();
  s.judged = s.coverage.judged_cases() - saved.coverage.judged_cases();
  s.next_index = completed_prefix();
  // The summary counts what its coverage counts: the completed prefix and the cases completed
  // beyond it (state.json keeps the prefix only, so --resume runs those again, counted once).
  s.known = prefix_known;
  for (const auto& [k, counts] : pending_known)
    for (const auto& [id, n] : counts) s.known[id] += n;
  s.cases_total = s.next_index + pending_coverage.size();
  s.seconds = elapsed();
  const auto half = std::lower_bound(judged_at.begin(), judged_at.end(), std::make_pair(s.seconds / 2, uint64_t{0}));
  if (s.seconds >= CampaignSummary::kSteadyMinSeconds && half != judged_at.end() && s.seconds > half->first) {
    s.steady_seconds = s.seconds - half->first;
    s.steady_judged = s.judged - std::min(s.judged, half->second);
  }
  if (o.minimize) minimize_findings(o);
  s.findings_by_class = store.by_class();
  s.signatures = store.signatures();
  std::sort(s.signatures.begin(), s.signatures.end());
  rundir::write_summary(o.out_dir, summary_of(s, o));
  return s;
}

void minimize_findings(const CampaignOptions& o) {
  if (!o.candidates || !o.size) return;
  std::vector<std::string> files;
  for (const auto& f : rundir::finding_files(rundir::findings_dir(o.out_dir)))
    if (!fs::exists(rundir::minimized_name(f))) files.push_back(f);
  // Findings are independent: one worker per job takes the next file, until the time is spent.
  std::atomic<size_t> next{0};
  const auto start = std::chrono::steady_clock::now();
  const OutOfTime out_of_time = [&o, start] {
    return o.minimize_seconds > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= o.minimize_seconds;
  };
  auto minimize_one = [&](WorkerProcess& proc, const std::string& path) {
    if (out_of_time()) return;  // not started: its representative stays as recorded
    Reproducer r;
    try {
      r = load_repro(path);
    } catch (const std::exception&) {
      return;
    }
    Reproducer m = minimize_isolated(proc, r, o, nullptr, out_of_time);
    m.minimized_from = fs::path(path).filename().string();
    rundir::write(rundir::minimized_name(path), write_repro(m));
  };
  const size_t workers = std::min(files.size(), std::max<size_t>(static_cast<size_t>(std::max(o.jobs, 1)), o.devices.size()));
  std::vector<std::thread> threads;
  std::mutex error_m;
  std::string error;
  for (size_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      // An exception must not leave a thread (std::terminate): the first one stops the others
      // and is rethrown after the join (a full disk, say).
      try {
        WorkerProcess proc(o.worker_argv, worker_env(o, w));
        for (size_t i = next++; i < files.size(); i = next++) minimize_one(proc, files[i]);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(error_m);
        if (error.empty()) error = std::string("minimizing findings: ") + e.what();
        next = files.size();
      }
    });
  for (auto& t : threads) t.join();
  if (!error.empty()) throw std::runtime_error(error);
}

rundir::Summary summary_of(const CampaignSummary& s, const CampaignOptions& o) {
  rundir::Summary r;
  r.seed = o.seed;
  r.shard = std::to_string(o.shard) + "/" + std::to_string(o.shards);
  r.backends = o.backends;
  r.cases = s.cases_total;
  r.findings_by_class = s.findings_by_class;
  r.signatures = s.signatures;
  r.coverage = s.coverage;
  if (!o.known.empty()) {
    r.known_findings = s.known;
    r.known_deviations = o.known.all().size();
  }
  if (o.mutation_share > 0) r.guided = rundir::Summary::Guided{o.mutation_share, s.guided, s.corpus_entries};
  return r;
}

}  // namespace attnfuzz
