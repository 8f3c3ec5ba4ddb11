// `attnfuzz campaign`, `attnfuzz check`, `attnfuzz replay`, `attnfuzz merge`, and the
// hidden `attnfuzz worker` that runs cases in an isolated process.
#include <fcntl.h>
#include <fmt/core.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include "harness/report.h"
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "generators/random_case.h"
#include "generators/shrink.h"
#include "harness/campaign.h"
#include "harness/case_json.h"
#include "harness/cli/commands.h"
#include "harness/cli/coverage_output.h"
#include "harness/differential.h"
#include "harness/errors.h"
#include "harness/inputs.h"
#include "harness/json_input.h"
#include "harness/junit.h"
#include "harness/minimize.h"
#include "harness/rng.h"
#include "harness/worker.h"
#include "oracles/registry.h"

namespace attnfuzz::cli {
namespace fs = std::filesystem;

std::vector<std::string> worker_argv(const std::vector<std::string>& backends) {
  return {self_executable(), "worker", "--backends", fmt::format("{}", fmt::join(backends, ","))};
}

using nlohmann::json;

namespace {

std::vector<std::string> resolve_backends(const std::vector<std::string>& given) {
  return given.empty() ? default_backend_names() : given;
}

// The default mix: random cases of every kind, in the size tier of --tier (generators/domain.h;
// the CPU default `small` keeps Sq, Skv <= 64 for throughput and reaches every kernel head dim).
Case campaign_case(uint64_t seed, uint64_t index, const RandomCaseOptions& g) {
  return random_case(splitmix64(seed ^ splitmix64(index)), g);
}

RandomCaseOptions tier_options(const std::string& tier, int64_t max_seq) {
  const auto t = domain::tier_from_name(tier);
  if (!t) throw std::invalid_argument("--tier takes toy, small or real, got '" + tier + "'");
  RandomCaseOptions g = RandomCaseOptions::for_tier(*t);
  if (max_seq > 0) g.max_seq = max_seq;
  return g;
}

struct CampaignArgs {
  uint64_t seed = 1;
  double seconds = 30;
  uint64_t cases = 0;
  std::string shard = "0/1";
  std::vector<std::string> backends;
  std::string out;  // default: attnfuzz-runs/<UTC time>
  bool resume = false, no_minimize = false, quiet = false;
  int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string devices;
  double timeout = 30;
  std::string tier = domain::tier_name(domain::kDefaultCpuTier);
  int64_t max_seq = 0;  // 0: the tier's
};

CampaignOptions to_options(const CampaignArgs& a) {
  CampaignOptions o;
  o.seed = a.seed;
  o.budget_seconds = a.seconds;
  o.budget_cases = a.cases;
  const auto slash = a.shard.find('/');
  if (slash == std::string::npos) throw std::invalid_argument("--shard takes i/N");
  o.shard = std::stoi(a.shard.substr(0, slash));
  o.shards = std::stoi(a.shard.substr(slash + 1));
  o.out_dir = a.out;
  // --resume continues with the backends the campaign recorded, unless others are named
  // (and then run_campaign refuses them if they differ).
  const std::vector<std::string> recorded = a.resume && !a.out.empty() && a.backends.empty() ? recorded_backends(a.out) : std::vector<std::string>{};
  o.backends = recorded.empty() ? resolve_backends(a.backends) : recorded;
  if (o.out_dir.empty()) {
    char stamp[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::gmtime(&now));
    o.out_dir = std::string("attnfuzz-runs/") + stamp;
  }
  o.resume = a.resume;
  o.jobs = a.jobs;
  std::stringstream ss(a.devices);
  for (std::string d; std::getline(ss, d, ',');)
    if (!d.empty()) o.devices.push_back(d);
  o.timeout_seconds = a.timeout;
  o.minimize = !a.no_minimize;
  o.quiet = a.quiet;
  const uint64_t seed = a.seed;
  const RandomCaseOptions gen = tier_options(a.tier, a.max_seq);
  o.make_case = [seed, gen](uint64_t g) { return campaign_case(seed, g, gen); };
  o.candidates = shrink_candidates;
  o.size = case_size;
  o.worker_argv = worker_argv(o.backends);
  return o;
}

void add_campaign_flags(CLI::App* cmd, CampaignArgs& a) {
  cmd->add_option("--seed", a.seed, "campaign seed (the case stream is a function of it)");
  cmd->add_option("--backends", a.backends, "backends (default: every CPU backend here)")->delimiter(',');
  cmd->add_option("--out", a.out, "output directory: findings/, state.json, summary.json, report.html (default attnfuzz-runs/<time>)");
  cmd->add_option("--shard", a.shard, "i/N: run the i-th of N disjoint deterministic case streams");
  cmd->add_option("--jobs", a.jobs, "worker processes")->check(CLI::Range(1, 256));
  cmd->add_option("--devices", a.devices, "comma-separated GPU ids: one worker per GPU (CUDA_VISIBLE_DEVICES)");
  cmd->add_option("--timeout", a.timeout, "watchdog per case, seconds (a hang becomes a timeout finding)");
  cmd->add_option("--tier", a.tier, "size tier of generated cases: toy, small (default) or real (docs/fuzzing.md)");
  cmd->add_option("--max-seq", a.max_seq, "largest Sq and Skv of generated cases (default: the tier's)")->check(CLI::Range(1, 1 << 16));
  cmd->add_flag("--no-minimize", a.no_minimize, "record findings without minimizing them");
  cmd->add_flag("--quiet", a.quiet, "no progress lines");
  cmd->add_option_function<std::string>("--oracle-device", set_oracle_device_override, "oracles: auto (default), cpu or cuda (docs/gpu.md)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
}

// `untested`, when given, is set when some backend ran no case.
int campaign_command(const CampaignArgs& a, bool* untested = nullptr) {
  CampaignOptions o;
  try {
    o = to_options(a);
  } catch (const std::exception& e) {
    fmt::print(stderr, "attnfuzz: {}\n", e.what());
    return kExitBadInput;
  }
  fmt::print("campaign  seed {} shard {} backends {} -> {}\n", o.seed, a.shard, fmt::join(o.backends, ","), o.out_dir);
  std::fflush(stdout);
  CampaignSummary s;
  try {
    s = run_campaign(o);
  } catch (const BackendLoadError& e) {
    fmt::print(stderr, "attnfuzz: --backends: {}\n", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    fmt::print(stderr, "attnfuzz: {}\n", e.what());
    return kExitBadInput;
  }
  fmt::print("done      {} cases in {:.1f} s ({:.1f} cases/s), {} finding(s)\n", s.cases, s.seconds,
             s.seconds > 0 ? static_cast<double>(s.cases) / s.seconds : 0.0, s.signatures.size());
  for (const auto& sig : s.signatures) fmt::print("  {}\n", sig);
  print_coverage(s.coverage);
  try {
    fmt::print("report    {}\n", write_report(o.out_dir, finding_profile));
  } catch (const std::exception& e) {  // a full disk, say: the findings are recorded, the report is not
    std::fflush(stdout);
    fmt::print(stderr, "attnfuzz: report: {}\n", e.what());
    return kExitBadInput;
  }
  if (untested) *untested = !s.coverage.untested().empty();
  return s.signatures.empty() ? kExitOk : kExitDivergence;
}

// --- replay ---------------------------------------------------------------------------

// A path named on the command line is a reproducer, or an error. Inside a directory, .json
// files of the project's other formats (cases, summaries, campaign state) are skipped;
// everything else (a truncated, empty or unknown file) is judged, and so an error.
struct ReplayInput {
  std::string path;
  bool named = false;  // given on the command line, not found in a directory
};

std::vector<ReplayInput> collect_repros(const std::vector<std::string>& paths, std::vector<std::string>& missing) {
  std::vector<ReplayInput> out;
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<ReplayInput> found;
      for (const auto& e : fs::recursive_directory_iterator(p, ec))
        if (e.is_regular_file() && e.path().extension() == ".json") found.push_back({e.path().string(), false});
      std::sort(found.begin(), found.end(), [](const ReplayInput& a, const ReplayInput& b) { return a.path < b.path; });
      out.insert(out.end(), found.begin(), found.end());
    } else if (fs::exists(p, ec)) {
      out.push_back({p, true});
    } else {
      missing.push_back(p);
    }
  }
  return out;
}

// Another attnfuzz format that a directory of reproducers may hold beside them.
bool other_known_format(const std::string& text) {
  try {
    const json j = json::parse(text);
    const auto f = j.is_object() ? j.find("format") : j.end();
    if (f == j.end() || !f->is_string()) return false;
    const std::string format = f->get<std::string>();
    return format == kCaseFormat || format == "attnfuzz-summary/1" || format == "attnfuzz-campaign-state/1";
  } catch (const json::exception&) {
    return false;
  }
}

int replay_command(const std::vector<std::string>& paths, const std::vector<std::string>& backends_override, const std::string& junit,
                   double timeout) {
  std::vector<JUnitCase> cases;
  int failing = 0, fixed = 0, errors = 0, skipped = 0, legacy = 0, bad_inputs = 0;
  std::vector<std::string> missing;
  const std::vector<ReplayInput> inputs = collect_repros(paths, missing);
  for (const auto& m : missing) {
    fmt::print("ERROR     {}: no such file or directory\n", m);
    cases.push_back({"replay", m, "no such file or directory", ""});
    ++errors, ++bad_inputs;
  }
  for (const auto& [path, named] : inputs) {
    Reproducer r;
    try {
      const std::string text = read_input_file(path);
      if (!named && other_known_format(text)) {
        ++skipped;  // a case, a summary or a state file beside the reproducers
        continue;
      }
      r = parse_repro(text);
    } catch (const CaseError& e) {
      fmt::print("ERROR     {}: {}\n", path, e.what());
      cases.push_back({"replay", path, std::string("unreadable: ") + e.what(), ""});
      ++errors, ++bad_inputs;
      continue;
    }
    if (r.legacy_checksum) {
      ++legacy;
      fmt::print("note      {}: written before record_checksum: only its inputs can be verified\n", path);
    }
    const uint64_t sum = checksum(generate_inputs(r.c));
    // Old crash and timeout reproducers recorded no input checksum (zero); new ones always do.
    if ((r.input_checksum || !r.legacy_checksum) && sum != r.input_checksum) {
      fmt::print("ERROR     {}: input checksum {:016x} differs from the recorded {:016x}; not judged\n", path, sum, r.input_checksum);
      cases.push_back({"replay", path, "input checksum differs from the recorded one", ""});
      ++errors, ++bad_inputs;
      continue;
    }
    const std::vector<std::string> names = backends_override.empty() ? r.backends : backends_override;
    CampaignOptions o;
    o.backends = names;
    o.timeout_seconds = timeout;
    o.worker_argv = worker_argv(names);
    WorkerProcess w(o.worker_argv, {});
    const json req{{"op", "run"}, {"case", to_json(r.c)}};
    const WorkerProcess::Reply reply = w.request(req.dump(), timeout);
    bool still = false;
    const Signature& sig = r.finding.signature;
    if (reply.status != WorkerProcess::Reply::Status::ok) {
      const FindingClass died = reply.status == WorkerProcess::Reply::Status::timed_out ? FindingClass::timeout : FindingClass::crash;
      still = sig.cls == died;
      if (!still) {
        fmt::print("ERROR     {}: the worker died ({}) while replaying\n", path, reply.detail);
        cases.push_back({"replay", path, "worker died: " + reply.detail, ""});
        ++errors;
        continue;
      }
    } else {
      const json j = json::parse(reply.body);
      if (j.contains("error")) {
        fmt::print("ERROR     {}: {}\n", path, j.at("error").get<std::string>());
        cases.push_back({"replay", path, j.at("error").get<std::string>(), ""});
        ++errors;
        continue;
      }
      for (const auto& f : j.at("findings"))
        if (parse_repro(f.dump()).finding.signature == sig) still = true;
    }
    if (still) {
      ++failing;
      fmt::print("FAILING   {}  {}\n", path, sig.to_string());
      cases.push_back({"replay", path, "still failing: " + sig.to_string(), ""});
    } else {
      ++fixed;
      fmt::print("fixed     {}  {}\n", path, sig.to_string());
      cases.push_back({"replay", path, "", "fixed: " + sig.to_string()});
    }
  }
  fmt::print("{} still failing, {} fixed, {} errors, {} files skipped (not reproducers){}\n", failing, fixed, errors, skipped,
             legacy ? fmt::format(", {} legacy (inputs verified only)", legacy) : std::string());
  if (!junit.empty()) write_file_atomic(junit, junit_xml("attnfuzz.replay", cases));
  // A finding still failing, or a replay that went wrong, is 1; otherwise a file that is no
  // reproducer, an edited one or one whose inputs differ is bad input, 2.
  if (failing || errors > bad_inputs) return kExitDivergence;
  return bad_inputs ? kExitBadInput : kExitOk;
}

// --- worker -----------------------------------------------------------------------------

int worker_command(const std::vector<std::string>& names) {
  // The protocol runs over the descriptors WorkerProcess set up; stdout is already stderr.
  set_backend_threads(1);
  std::optional<WorkerChannel> channel;
  try {
    channel.emplace(WorkerChannel::from_environment());
  } catch (const std::exception& e) {
    fmt::print(stderr, "attnfuzz: worker: {}\n", e.what());
    return kExitBadInput;
  }
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> backends;
  std::string load_error;  // the first backend that cannot be loaded
  // The backends load once the first request (the campaign's probe, or a case) is in: its
  // progress frames then carry that request's seq, so a plugin that crashes while loading
  // is named in the reply to it (frames of no request are dropped as stale).
  bool loaded = false;
  auto load_backends = [&] {
    for (const auto& n : names) {
      channel->progress(n);
      try {
        owned.push_back(make_backend(n));
        backends.push_back(owned.back().get());
      } catch (const std::exception& e) {
        if (load_error.empty()) load_error = e.what();
      }
    }
  };
  std::string body;
  while (channel->next_request(body)) {
    if (!loaded) {
      load_backends();
      loaded = true;
    }
    json reply;
    try {
      const json req = json::parse(body);
      if (req.value("op", "run") == "probe") {  // the campaign asks, before any case, whether everything loaded
        if (!load_error.empty()) reply["error"] = load_error;
        json loaded = json::array();
        for (const Backend* b : backends) loaded.push_back(b->name());
        reply["backends"] = loaded;
        channel->reply(reply.dump());
        continue;
      }
      if (!load_error.empty()) throw std::runtime_error(load_error);
      const Case c = case_from_json(req.at("case"));
      const OracleSet oracles = oracles_for(backends, c.shape);  // per case: oracles/registry.h, choose_oracle_device
      DiffOptions opt;
      opt.fingerprint_all = false;
      opt.check_determinism = req.value("determinism", true);
      opt.gpu_health = gpu_health;
      opt.on_backend = [&channel](const std::string& b) { channel->progress(b); };
      const DiffReport r = run_differential(c, backends, oracles, opt);
      json findings = json::array();
      for (const auto& f : r.findings)
        findings.push_back(json::parse(write_repro(Reproducer{c, names, f, r.rule.describe(), r.input_checksum, "", -1, environment()})));
      reply["findings"] = findings;
      reply["runs"] = to_json(run_outcomes(r));
      if (r.gpu_error) reply["restart"] = true;  // the parent starts a fresh worker (see DiffReport)
    } catch (const std::exception& e) {
      reply["error"] = e.what();
      reply["findings"] = json::array();
    }
    reply["environment"] = environment();
    channel->reply(reply.dump());
  }
  return kExitOk;
}

// --- merge ------------------------------------------------------------------------------

// Why `dir` cannot be merged (nothing when it can): it must be a campaign output directory.
std::optional<std::string> not_mergeable(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return dir + ": no such directory";
  if (!fs::is_directory(dir, ec)) return dir + ": not a directory";
  if (!fs::exists(dir + "/summary.json", ec) && !fs::is_directory(dir + "/findings", ec))
    return dir + ": not a campaign output directory (no summary.json, no findings/)";
  return std::nullopt;
}

int merge_command(const std::vector<std::string>& dirs, const std::string& out) {
  // Everything is checked before anything is written: the inputs must be campaign
  // directories, and the output none of them (merging into an input overwrote its files).
  for (const auto& d : dirs) {
    if (const auto why = not_mergeable(d)) {
      fmt::print(stderr, "attnfuzz: merge: {}\n", *why);
      return kExitBadInput;
    }
    std::error_code ec;
    if (fs::exists(out, ec) && fs::equivalent(out, d, ec)) {
      fmt::print(stderr, "attnfuzz: merge: --out {} is one of the inputs: choose another directory\n", out);
      return kExitBadInput;
    }
  }
  std::map<std::string, std::pair<int64_t, std::string>> best;  // signature -> (case index, file)
  uint64_t cases = 0;
  int unreadable = 0;
  Coverage coverage;
  json shards = json::array();
  try {
    for (const auto& d : dirs) {
      if (fs::exists(d + "/summary.json")) {
        json s;
        try {
          s = parse_strict_json(read_input_file(d + "/summary.json"));
        } catch (const CaseError& e) {
          throw std::runtime_error(d + "/summary.json: " + e.what());
        }
        if (!s.is_object() || !s.contains("cases") || !s.at("cases").is_number_unsigned())
          throw std::runtime_error(d + "/summary.json: not an attnfuzz summary (no case count)");
        cases += s.at("cases").get<uint64_t>();
        try {
          if (s.contains("coverage")) coverage.add(Coverage::from_json(s.at("coverage")));
        } catch (const std::exception& e) {
          throw std::runtime_error(d + "/summary.json: coverage: " + e.what());
        }
        shards.push_back(s.contains("shard") ? s.at("shard") : json("?"));
      }
      if (!fs::exists(d + "/findings")) continue;
      for (const auto& e : fs::directory_iterator(d + "/findings")) {
        const std::string p = e.path().string();
        if (e.path().extension() != ".json" || p.find(".min.json") != std::string::npos) continue;
        try {
          const Reproducer r = load_repro(p);
          const std::string key = r.finding.signature.to_string();
          auto it = best.find(key);
          if (it == best.end() || r.case_index < it->second.first) best[key] = {r.case_index, p};
        } catch (const CaseError& e) {  // damaged or edited: said, and left out
          fmt::print(stderr, "attnfuzz: merge: warning: {} left out: {}\n", p, e.what());
          ++unreadable;
        }
      }
    }
    fs::create_directories(out + "/findings");
    std::map<std::string, int> by_class;
    std::vector<std::string> sigs;
    for (const auto& [key, v] : best) {
      const std::string name = fs::path(v.second).filename().string();
      fs::copy_file(v.second, out + "/findings/" + name, fs::copy_options::overwrite_existing);
      const std::string min = v.second.substr(0, v.second.size() - 5) + ".min.json";
      if (fs::exists(min)) fs::copy_file(min, out + "/findings/" + fs::path(min).filename().string(), fs::copy_options::overwrite_existing);
      ++by_class[to_string(load_repro(v.second).finding.signature.cls)];
      sigs.push_back(key);
    }
    json s{{"format", "attnfuzz-summary/1"}, {"merged_shards", shards}, {"cases", cases},
           {"findings_by_class", by_class},   {"signatures", sigs},     {"coverage", coverage.to_json()}};
    write_file_atomic(out + "/summary.json", s.dump(2) + "\n");
  } catch (const std::exception& e) {  // a damaged summary, an unwritable --out, a full disk
    fmt::print(stderr, "attnfuzz: merge: {}\n", e.what());
    return kExitBadInput;
  }
  fmt::print("merged {} directories: {} cases, {} distinct finding(s){} -> {}\n", dirs.size(), cases, best.size(),
             unreadable ? fmt::format(", {} unreadable finding file(s) left out", unreadable) : std::string(), out);
  print_coverage(coverage);
  return kExitOk;
}

}  // namespace

void add_campaign_commands(CLI::App& app, int& exit_code) {
  auto ca = std::make_shared<CampaignArgs>();
  CLI::App* campaign = app.add_subcommand("campaign", "Fuzz campaign: generated cases through every backend, isolated, recorded");
  add_campaign_flags(campaign, *ca);
  campaign->add_option("--seconds", ca->seconds, "time budget");
  campaign->add_option("--cases", ca->cases, "case budget of this shard (0: time only)");
  campaign->add_flag("--resume", ca->resume, "continue the campaign recorded in --out");
  campaign->callback([ca, &exit_code] { exit_code = campaign_command(*ca); });

  struct CheckArgs {
    CampaignArgs c;
    std::string junit, json_out;
  };
  auto ch = std::make_shared<CheckArgs>();
  ch->c.cases = 200;
  ch->c.seconds = 1e9;
  ch->c.jobs = 1;
  ch->c.out = "attnfuzz-check";
  CLI::App* check = app.add_subcommand("check", "Pre-merge check: fixed seed and case budget, deterministic, JUnit + JSON, exit code");
  add_campaign_flags(check, ch->c);
  check->add_option("--cases", ch->c.cases, "case budget");
  check->add_option("--junit", ch->junit, "JUnit XML file (default: OUT/junit.xml)");
  check->add_option("--json", ch->json_out, "JSON summary file (default: OUT/summary.json)");
  check->callback([ch, &exit_code] {
    if (fs::exists(ch->c.out)) fs::remove_all(ch->c.out);  // a check always starts from nothing
    bool untested = false;
    exit_code = campaign_command(ch->c, &untested);
    if (exit_code == kExitBadInput) return;
    std::vector<JUnitCase> cases;
    std::ifstream in(ch->c.out + "/summary.json");
    const json s = json::parse(in);
    for (const auto& sig : s.at("signatures")) cases.push_back({"attnfuzz.check", sig.get<std::string>(), "divergence: " + sig.get<std::string>(), ""});
    cases.push_back({"attnfuzz.check", "cases=" + std::to_string(s.value("cases", 0)), "", ""});
    for (const auto& c : coverage_junit_cases(Coverage::from_json(s.value("coverage", json::object())))) cases.push_back(c);
    if (untested) exit_code = kExitUntested;
    write_file_atomic(ch->junit.empty() ? ch->c.out + "/junit.xml" : ch->junit, junit_xml("attnfuzz.check", cases));
    if (!ch->json_out.empty()) fs::copy_file(ch->c.out + "/summary.json", ch->json_out, fs::copy_options::overwrite_existing);
  });

  struct ReplayArgs {
    std::vector<std::string> paths, backends;
    std::string junit;
    double timeout = 60;
  };
  auto ra = std::make_shared<ReplayArgs>();
  CLI::App* replay = app.add_subcommand("replay", "Re-run reproducers: still failing / fixed; non-zero exit on any divergence");
  replay->add_option("paths", ra->paths, "reproducer files or directories")->required();
  replay->add_option("--backends", ra->backends, "override the recorded backends")->delimiter(',');
  replay->add_option("--junit", ra->junit, "JUnit XML output");
  replay->add_option("--timeout", ra->timeout, "watchdog per reproducer, seconds");
  replay->add_option_function<std::string>("--oracle-device", set_oracle_device_override, "oracles: auto (default), cpu or cuda (docs/gpu.md)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  replay->callback([ra, &exit_code] { exit_code = replay_command(ra->paths, ra->backends, ra->junit, ra->timeout); });

  auto wb = std::make_shared<std::vector<std::string>>();
  CLI::App* worker = app.add_subcommand("worker", "")->group("");  // hidden: spawned by campaign/replay
  worker->add_option("--backends", *wb)->delimiter(',');
  worker->callback([wb, &exit_code] { exit_code = worker_command(*wb); });

  struct MergeArgs {
    std::vector<std::string> dirs;
    std::string out = "attnfuzz-merged";
  };
  auto ma = std::make_shared<MergeArgs>();
  CLI::App* merge = app.add_subcommand("merge", "Combine shard outputs into one findings store and summary");
  merge->add_option("dirs", ma->dirs, "campaign output directories")->required();
  merge->add_option("--out", ma->out, "merged output directory");
  merge->callback([ma, &exit_code] { exit_code = merge_command(ma->dirs, ma->out); });
}

}  // namespace attnfuzz::cli
