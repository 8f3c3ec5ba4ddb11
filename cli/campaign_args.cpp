// The flags `campaign` and `check` share, and the campaign run they describe.
#include "cli/campaign_args.h"

#include <fmt/core.h>
#include <fmt/format.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <type_traits>
#include <variant>

#include "campaign/report.h"
#include "campaign/run_dir.h"
#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/coverage_output.h"
#include "cli/visible_gpus.h"
#include "generators/mutate.h"
#include "generators/random_case.h"
#include "generators/shrink.h"
#include "harness/errors.h"
#include "harness/plugin_path.h"
#include "harness/rng.h"
#include "backends/registry.h"

namespace attnfuzz::cli {

std::vector<std::string> worker_argv(const std::vector<std::string>& backends) {
  return {self_executable(), "worker", "--backends", fmt::format("{}", fmt::join(backends, ","))};
}

namespace {

std::vector<std::string> resolve_backends(const std::vector<std::string>& given) { return given.empty() ? default_backend_names() : given; }

// The case options of --tier (generators/domain.h): auto is the real tier when some backend
// under test computes on a GPU, else the CPU default `small` (Sq, Skv <= 64 for throughput, every
// kernel head dim).
RandomCaseOptions tier_options(const std::string& tier, bool gpu, int64_t max_seq, int64_t max_dim) {
  const auto t = tier == "auto" ? std::optional(gpu ? domain::SizeTier::real : domain::kDefaultCpuTier) : domain::tier_from_name(tier);
  if (!t) throw std::invalid_argument("--tier takes auto, toy, small, real or decode, got '" + tier + "'");
  RandomCaseOptions g = RandomCaseOptions::for_tier(*t);
  if (max_seq > 0) g.max_seq = max_seq;
  if (max_dim > 0) g.max_dim = max_dim;
  return g;
}

// The case mix (generators/envelope_cases.h) for the backends the probe loaded: blind, or aimed at
// their envelopes, one after the other; auto aims when one of them computes on a GPU.
CaseMix case_mix(const CampaignArgs& a, const std::vector<BackendProfile>& backends) {
  const bool gpu = std::any_of(backends.begin(), backends.end(), [](const BackendProfile& b) { return b.on_gpu(); });
  CaseMix mix;
  mix.gen = tier_options(a.tier, gpu, a.max_seq, a.max_dim);
  mix.gen.p_breaking_values = a.breaking_share.value_or(gpu ? kGpuBreakingShare : kCpuBreakingShare);
  if (!a.breaking_share)  // the default's share only: an explicit share draws every kind
    mix.gen.breaking_left_out = gpu ? kGpuBreakingLeftOut : std::vector<ValueFeature>{kCpuBreakingLeftOut};
  // By default a bias only where some backend under test takes one: the others skip such cases.
  const bool takes_bias = std::any_of(backends.begin(), backends.end(), [](const BackendProfile& b) { return b.envelope.bias; });
  mix.gen.p_bias = a.bias_share.value_or(gpu || !takes_bias ? 0.0 : kCpuBiasShare);
  // A ragged batch by default only where every backend under test takes one (a plugin that does
  // not, and none does unless it says so, would lose that share of a blind stream), and on the CPU:
  // on a GPU, the varlen backends' first campaign (stop 56, H100) raised findings not yet triaged
  // (docs/findings/LEDGER.md), so a GPU campaign asks for it with --ragged-share.
  const bool takes_ragged =
      !backends.empty() && std::all_of(backends.begin(), backends.end(), [](const BackendProfile& b) { return b.envelope.ragged; });
  mix.gen.p_ragged = a.ragged_share.value_or(!gpu && takes_ragged ? kRaggedShare : 0.0);
  mix.edge_share = a.edge_share;
  mix.memory_budget_bytes = Limits{}.memory_budget_bytes;
  // The GPU real tier shrinks for what its workers keep on the host, not for the CPU set's
  // per-head matrices, which it never builds there.
  mix.host_work = [backends](const Shape& s) { return host_work_of(backends, s); };
  if (a.case_mix == "aimed" || (a.case_mix == "auto" && gpu))
    for (const auto& b : backends) mix.targets.push_back({b.name, b.envelope, b.on_gpu()});
  return mix;
}

std::function<std::function<AimedCase(uint64_t)>(const std::vector<BackendProfile>&)> case_stream(const CampaignArgs& a) {
  return [a](const std::vector<BackendProfile>& backends) {
    return [seed = a.seed, mix = case_mix(a, backends)](uint64_t g) { return aimed_campaign_case(seed, g, mix); };
  };
}

// A guided campaign's mutations and redraws (campaign/campaign.h, CaseGuide) over the same mix.
std::function<CaseGuide(const std::vector<BackendProfile>&)> case_guide(const CampaignArgs& a) {
  return [a](const std::vector<BackendProfile>& backends) {
    const CaseMix mix = case_mix(a, backends);
    // A case made inside `backend`'s envelope by make(envelope); nothing for a backend not loaded
    // now (a corpus slot of an earlier run) or when none came. An aimed stream's case is aimed
    // inside the backend it is meant for.
    auto inside = [mix, backends](const std::string& backend, const auto& make) -> std::optional<AimedCase> {
      const auto b = std::find_if(backends.begin(), backends.end(), [&](const BackendProfile& p) { return p.name == backend; });
      if (b == backends.end()) return std::nullopt;
      std::optional<Case> c = make(b->envelope);
      if (!c) return std::nullopt;
      AimedCase out{std::move(*c), "", CaseAim::blind, std::nullopt};
      if (!mix.targets.empty()) {
        out.target = backend;
        out.aim = CaseAim::inside;
      }
      return out;
    };
    CaseGuide guide;
    guide.mutate = [mix, inside](const Case& parent, const std::string& backend, uint64_t seed) {
      return inside(backend, [&](const SupportEnvelope& e) { return mutate_case(parent, seed, e, mix); });
    };
    guide.redraw = [seed = a.seed, mix](uint64_t g, uint64_t draw) {
      return aimed_campaign_case(splitmix64(seed ^ splitmix64(draw ^ 0x7265647261772d31ull)), g, mix);
    };
    guide.in_cell = [mix, inside](const Case& drawn, const std::string& backend, const FeatureCell& cell, uint64_t seed) {
      return inside(backend, [&](const SupportEnvelope& e) { return case_in_cell(drawn, cell, e, mix, seed); });
    };
    return guide;
  };
}

// --resume keeps the known deviations the campaign recorded (OUT/known.json); an explicit
// --known replaces them, and says so.
void resume_known(const CampaignArgs& a, CampaignOptions& o) {
  const RecordedKnown& recorded = o.resume->known;
  if (a.known.empty()) {
    if (recorded.recorded) o.known = recorded.set;
    if (recorded.counted_without_set)
      fmt::print(stderr,
                 "attnfuzz: WARNING: --resume: {} counted known deviations but does not record which (an older attnfuzz); "
                 "without --known their re-findings are now recorded as new: give the same --known again\n",
                 o.out_dir);
    return;
  }
  if (recorded.recorded || recorded.counted_without_set)
    fmt::print(stderr, "attnfuzz: note: --resume with --known: {} known deviation(s) from {} replace the {} the campaign recorded\n",
               o.known.all().size(), fmt::join(a.known, ","),
               recorded.recorded ? std::to_string(recorded.set.all().size()) : std::string("ones"));
  else
    fmt::print(stderr, "attnfuzz: note: --resume with --known: the campaign had no known deviations; from now on {} are counted apart\n",
               o.known.all().size());
}

}  // namespace

HostWork host_work_of(const std::vector<BackendProfile>& backends, const Shape& shape) {
  const bool gpu = std::any_of(backends.begin(), backends.end(), [](const BackendProfile& b) { return b.on_gpu(); });
  HostWork w;
  w.oracles = expected_oracle_device(gpu, shape) == Device::cpu ? HostWork::Oracles::host : HostWork::Oracles::device;
  w.backends = HostScores::none;
  for (const auto& b : backends) w.backends = std::max(w.backends, b.host_scores);
  return w;
}

namespace {

// The case stream's flags (besides --seed and --shard), one row each: the name state.json and
// the refusals use (the flag without its dashes) and the field it sets.
using StreamField = std::variant<std::string CampaignArgs::*, double CampaignArgs::*, std::optional<double> CampaignArgs::*,
                                 int64_t CampaignArgs::*>;
const std::pair<const char*, StreamField> kStreamFlags[] = {
    {"tier", &CampaignArgs::tier},
    {"case-mix", &CampaignArgs::case_mix},
    {"edge-share", &CampaignArgs::edge_share},
    {"breaking-share", &CampaignArgs::breaking_share},
    {"bias-share", &CampaignArgs::bias_share},
    {"ragged-share", &CampaignArgs::ragged_share},
    {"mutation-share", &CampaignArgs::mutation_share},
    {"max-seq", &CampaignArgs::max_seq},
    {"max-dim", &CampaignArgs::max_dim},
};

// Sets the field of `a` from its recorded JSON value (stream_flags_of's; a share left to its
// default is null).
void set_stream_flag(CampaignArgs& a, const StreamField& field, const nlohmann::json& v) {
  std::visit(
      [&](auto member) {
        auto& out = a.*member;
        using T = std::decay_t<decltype(out)>;
        if constexpr (std::is_same_v<T, std::optional<double>>)
          out = v.is_null() ? std::nullopt : std::optional<double>(v.get<double>());
        else
          out = v.get<T>();
      },
      field);
}

}  // namespace

nlohmann::json stream_flags_of(const CampaignArgs& a) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, field] : kStreamFlags)
    std::visit(
        [&, name = name](auto member) {
          const auto& v = a.*member;
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::optional<double>>)
            j[name] = v ? nlohmann::json(*v) : nlohmann::json(nullptr);
          else
            j[name] = v;
        },
        field);
  return j;
}

namespace {

// The flags a --resume draws its cases with: the recorded seed and stream flags (state.json
// "stream"), except those given, each of which must have its recorded value; the rest as given.
CampaignArgs resumed_args(const CampaignArgs& a, const SavedCampaign& saved, const std::string& out) {
  CampaignArgs r = a;
  // The cases are a function of the seed: the recorded one unless --seed is named (and then
  // run_campaign refuses it if it differs).
  if (!a.seed_given) r.seed = saved.seed;
  if (!saved.stream_flags) {
    fmt::print(stderr, "attnfuzz: note: --resume: {} records no case-stream flags (an older attnfuzz): the cases follow the flags given "
                       "now (--tier, --case-mix and the shares)\n", message_safe(rundir::state_path(out), 400));
    return r;
  }
  const nlohmann::json given = stream_flags_of(a);
  for (const auto& [flag, field] : kStreamFlags) {
    const std::string name = flag;
    const auto recorded = saved.stream_flags->find(name);
    if (recorded == saved.stream_flags->end()) continue;  // recorded by an attnfuzz without this flag
    const nlohmann::json& value = *recorded;
    if (a.stream_flags_given.count(name)) {
      if (given.at(name) != value)
        throw std::invalid_argument("--resume: --" + name + " " + message_safe(given.at(name).dump(), 40) + " differs from the " +
                                    message_safe(value.dump(), 40) + " " + rundir::state_path(out) +
                                    " records: the case stream would change; resume without --" + name + ", or use another --out");
      continue;
    }
    try {
      set_stream_flag(r, field, value);
    } catch (const std::exception& e) {
      throw std::invalid_argument("--resume: " + rundir::state_path(out) + ": stream: " + name + ": " + message_safe(e.what(), 120));
    }
  }
  return r;
}

}  // namespace

CampaignOptions to_options(const CampaignArgs& args) {
  CampaignOptions o;
  if (args.resume && args.out.empty()) throw std::invalid_argument("--resume needs --out, the directory of the campaign to continue");
  if (args.resume && !std::filesystem::exists(rundir::state_path(args.out)))
    throw std::invalid_argument("--resume: " + args.out + " holds no campaign to continue (no state.json): run without --resume");
  // The one read of the campaign's state.json, checked whole before any worker starts.
  if (args.resume) o.resume = read_saved_campaign(args.out);
  // A --resume draws the cases as the campaign did: the recorded stream flags, unless given.
  const CampaignArgs a = o.resume ? resumed_args(args, *o.resume, args.out) : args;
  o.stream_flags = stream_flags_of(a);
  o.seed = a.seed;
  o.budget_seconds = a.seconds;
  o.budget_cases = a.cases;
  parse_shard(a.shard, o.shard, o.shards);
  refuse_repeated_backends(a.backends);
  o.out_dir = a.out;
  // --resume continues the recorded shard unless another is named (and then run_campaign
  // refuses it if it differs); the seed is resumed_args's.
  if (o.resume && !a.shard_given) {
    o.shard = o.resume->shard;
    o.shards = o.resume->shards;
  }
  // --resume continues with the backends the campaign recorded, unless others are named
  // (and then run_campaign refuses them if they differ).
  const bool recorded = o.resume && a.backends.empty() && o.resume->backends && !o.resume->backends->empty();
  o.backends = recorded ? *o.resume->backends : resolve_backends(a.backends);
  if (o.out_dir.empty()) {
    char stamp[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::gmtime(&now));
    o.out_dir = std::string("attnfuzz-runs/") + stamp;
  }
  o.jobs = a.jobs;
  o.devices = parse_devices(a.devices);
  // One worker per id: the ids count against the same cap as --jobs, or 300 ids would start 300
  // workers, on a machine with no GPU as well.
  if (o.devices.size() > static_cast<size_t>(kMaxJobs))
    throw std::invalid_argument("--devices: " + std::to_string(o.devices.size()) + " ids, one worker each: more than the " +
                                std::to_string(kMaxJobs) + " workers --jobs allows");
  // Each id names a GPU here, once: otherwise its worker starts and fails every case.
  if (!o.devices.empty()) check_device_ids(o.devices);
  o.timeout_seconds = a.timeout;
  // --resume keeps a campaign recorded with --no-minimize unminimized; --no-minimize always stops it.
  o.minimize = !a.no_minimize && !(o.resume && o.resume->minimize == false);
  // Minimizing after a short campaign on a GPU judges each candidate in a fresh worker: without a
  // limit, a 30 s campaign's findings took minutes more on the H200 (docs/campaigns.md).
  o.minimize_seconds = a.minimize_seconds >= 0 ? a.minimize_seconds : std::max(a.seconds, 60.0);
  o.quiet = a.quiet;
  tier_options(a.tier, false, a.max_seq, a.max_dim);  // a bad --tier is refused before any worker starts
  if (a.case_mix != "auto" && a.case_mix != "blind" && a.case_mix != "aimed")
    throw std::invalid_argument("--case-mix takes auto, blind or aimed, got '" + a.case_mix + "'");
  if (!(a.edge_share >= 0.0 && a.edge_share <= 1.0))
    throw std::invalid_argument("--edge-share takes a share in [0, 1], got " + std::to_string(a.edge_share));
  if (a.breaking_share && !(*a.breaking_share >= 0.0 && *a.breaking_share <= 1.0))
    throw std::invalid_argument("--breaking-share takes a share in [0, 1], got " + std::to_string(*a.breaking_share));
  if (a.bias_share && !(*a.bias_share >= 0.0 && *a.bias_share <= 1.0))
    throw std::invalid_argument("--bias-share takes a share in [0, 1], got " + std::to_string(*a.bias_share));
  if (a.ragged_share && !(*a.ragged_share >= 0.0 && *a.ragged_share <= 1.0))
    throw std::invalid_argument("--ragged-share takes a share in [0, 1], got " + std::to_string(*a.ragged_share));
  if (!(a.mutation_share >= 0.0 && a.mutation_share <= 1.0))
    throw std::invalid_argument("--mutation-share takes a share in [0, 1], got " + std::to_string(a.mutation_share));
  o.case_stream = case_stream(a);
  o.mutation_share = a.mutation_share;
  if (a.mutation_share > 0) o.guide = case_guide(a);
  o.candidates = shrink_candidates;
  o.size = case_size;
  o.worker_argv = worker_argv(o.backends);
  o.known = a.known.empty() ? KnownFindings{} : KnownFindings::load(a.known);
  if (a.resume) resume_known(a, o);
  return o;
}

void add_campaign_flags(CLI::App* cmd, CampaignArgs& a) {
  add_shared_option(cmd, Flag::seed, a.seed, "campaign seed (the case stream is a function of it; --resume: the recorded one)")
      ->each([&a](const std::string&) { a.seed_given = true; });
  add_shared_option(cmd, Flag::backends, a.backends, "to test (default: the fused GPU backends where a GPU is usable, else every CPU backend)");
  add_shared_option(cmd, Flag::out, a.out, "output directory: findings/, state.json, summary.json, report.html (default attnfuzz-runs/<time>)");
  cmd->add_option("--shard", a.shard, "i/N: run the i-th of N disjoint deterministic case streams (--resume: the recorded one)")
      ->each([&a](const std::string&) { a.shard_given = true; });
  cmd->add_option("--jobs", a.jobs, "worker processes")->check(CLI::Range(1, kMaxJobs));
  cmd->add_option("--devices", a.devices, "comma-separated GPU ids: one worker per GPU (CUDA_VISIBLE_DEVICES)");
  add_shared_option(cmd, Flag::timeout, a.timeout, "watchdog per case, seconds (a hang becomes a timeout finding)");
  // The case stream's flags: --resume continues the recorded ones (stream_flags_of).
  auto given = [&a](const char* name) { return [&a, name](const std::string&) { a.stream_flags_given.insert(name); }; };
  add_shared_option(cmd, Flag::tier, a.tier, "toy, small, real, decode (Sq <= 16 against Skv <= 64k), or auto (default: real when a backend under test runs on a GPU, else small; --resume: the recorded one)")
      ->each(given("tier"));
  cmd->add_option("--case-mix", a.case_mix,
                  "blind (random cases of every kind), aimed (inside each backend's support envelope in turn, a share just outside), "
                  "or auto (default: aimed when a backend under test runs on a GPU)")
      ->each(given("case-mix"));
  cmd->add_option("--edge-share", a.edge_share, "share of aimed cases put just outside one clause of an envelope (default 0.12)")
      ->each(given("edge-share"));
  cmd->add_option_function<double>(
      "--breaking-share",
      [&a](double share) {
        a.breaking_share = share;
        a.stream_flags_given.insert("breaking-share");
      },
      "share of cases carrying values that break kernels: rows with LSE far below zero, scores near fp16's overflow, "
      "subnormal inputs, dO zero in rows, large dO or dLSE (docs/fuzzing.md; default 0.25, without scores near fp16's "
      "overflow, and on a GPU without rows far below zero either; a share given draws every kind)");
  cmd->add_option_function<double>(
      "--bias-share",
      [&a](double share) {
        a.bias_share = share;
        a.stream_flags_given.insert("bias-share");
      },
      "share of cases with a score bias: a dense tensor broadcast over some dimensions, ALiBi or a relative-position table "
      "(docs/case-format.md; default 0.2 where every backend computes on the CPU and one of them takes a bias, else 0); "
      "aimed cases keep it only for backends that take one");
  cmd->add_option_function<double>(
      "--ragged-share",
      [&a](double share) {
        a.ragged_share = share;
        a.stream_flags_given.insert("ragged-share");
      },
      "share of cases with a ragged batch: each sequence its own query and key lengths (0 to the padded length), "
      "with poisoned gaps between sequences for varlen interfaces (docs/case-format.md; default 0.15 where every "
      "backend under test takes one and runs on the CPU, else 0); aimed cases keep it only for backends that take one");
  cmd->add_option("--mutation-share", a.mutation_share,
                  "share of cases drawn by mutating the corpus of passing cases nearest their limits, with steering toward thin "
                  "feature cells (docs/campaigns.md, \"Guided campaigns\"; default 0.3 for campaign, 0 for check; 0: blind)")
      ->each(given("mutation-share"));
  // A campaign's cases are judged against the float64 reference: longer rows than 2^16 are refused.
  add_shared_option(cmd, Flag::max_seq, a.max_seq)->check(CLI::Range(1, 1 << 16))->each(given("max-seq"));
  add_shared_option(cmd, Flag::max_dim, a.max_dim)->each(given("max-dim"));
  cmd->add_flag("--no-minimize", a.no_minimize, "record findings without minimizing them (--resume keeps a campaign's recorded --no-minimize)");
  cmd->add_option("--minimize-seconds", a.minimize_seconds,
                  "time for minimizing the findings after the cases, all together (default: max(--seconds, 60); 0: no limit); "
                  "when it is spent each keeps the smallest case found so far")
      ->check(CLI::Range(0.0, kMaxBudgetSeconds));
  cmd->add_flag("--quiet", a.quiet, "no progress lines");
  add_oracle_device_option(cmd);
  add_plugin_path_option(cmd);
  add_shared_option(cmd, Flag::known, a.known);
}

int campaign_command(const CampaignArgs& a, bool* untested) {
  CampaignOptions o;
  try {
    o = to_options(a);
  } catch (const std::exception& e) {
    fmt::print(stderr, "attnfuzz: {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  }
  fmt::print("campaign  seed {} shard {} backends {} -> {}\n", o.seed, a.shard,
             message_safe(fmt::format("{}", fmt::join(o.backends, ",")), 4000),
             message_safe(o.out_dir, 4000));  // escaped; cut only past what a real list of backends needs
  if (a.resume && a.known.empty() && !o.known.empty())
    fmt::print("known     {} known deviation(s) recorded with the campaign ({}/known.json)\n", o.known.all().size(), o.out_dir);
  std::fflush(stdout);
  CampaignSummary s;
  try {
    s = run_campaign(o);
  } catch (const BackendLoadError& e) {
    fmt::print(stderr, "attnfuzz: --backends: {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  } catch (const std::exception& e) {
    fmt::print(stderr, "attnfuzz: {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  }
  fmt::print("done      {} cases ({} judged, {} unjudged) in {:.1f} s ({:.1f} judged cases/s), {} finding(s)\n", s.cases, s.judged,
             s.cases - std::min(s.judged, s.cases), s.seconds, s.seconds > 0 ? static_cast<double>(s.judged) / s.seconds : 0.0,
             s.signatures.size());
  for (const auto& sig : s.signatures) fmt::print("  {}\n", sig);
  if (o.mutation_share > 0)
    fmt::print("guided    {} mutant(s) of the corpus (share {}), {} raised their parent's ratio; {} case(s) built for thin feature cells; {} corpus entries ({}/{})\n",
               s.guided.mutants, o.mutation_share, s.guided.raised, s.guided.steered, s.corpus_entries, message_safe(o.out_dir, 4000),
               rundir::kCorpusFile);
  if (s.steady_seconds > 0)
    fmt::print("steady    {:.2f} judged cases/s over the last {:.0f} s (the first half holds the workers' start and most compiles)\n",
               static_cast<double>(s.steady_judged) / s.steady_seconds, s.steady_seconds);
  if (!o.known.empty()) {
    uint64_t known = 0;
    for (const auto& [id, n] : s.known) known += n;
    fmt::print("known     {} finding(s) covered by {} known deviation(s), not recorded\n", known, o.known.all().size());
    for (const auto& [id, n] : s.known) fmt::print("  {}  {}\n", id, n);
  }
  print_coverage(s.coverage);
  try {
    std::vector<std::string> left_out;
    fmt::print("report    {}\n", write_report(o.out_dir, report_services(), &left_out));
    std::fflush(stdout);
    for (const auto& why : left_out) fmt::print(stderr, "attnfuzz: report: warning: {}\n", why);
  } catch (const std::exception& e) {  // a full disk, say: the findings are recorded, the report is not
    std::fflush(stdout);
    fmt::print(stderr, "attnfuzz: report: {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  }
  if (untested) *untested = !s.coverage.untested().empty();
  return s.signatures.empty() ? kExitOk : kExitDivergence;
}

}  // namespace attnfuzz::cli
