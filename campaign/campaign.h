#pragma once
// Campaigns: a time- or count-budgeted loop over generated cases, each run in an isolated
// worker process (harness/worker.h), findings deduplicated by signature and recorded
// atomically, progress on the terminal, resumable after a kill, sharded deterministically.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "campaign/coverage.h"
#include "campaign/guided_corpus.h"
#include "campaign/known.h"
#include "campaign/minimize.h"
#include "campaign/repro.h"
#include "campaign/run_dir.h"
#include "campaign/worker_protocol.h"
#include "harness/case.h"
#include "harness/feature_cell.h"
#include "harness/worker.h"

namespace attnfuzz {

// The confirmation watchdog on a GPU (CampaignOptions::confirm_timeout_factor): measured on the
// H200, a real-tier cudnn case that outlived 30 s among 12 workers took 40.6 s alone.
inline constexpr double kGpuConfirmTimeoutFactor = 4;

// A case's watchdog grows with the case (docs/campaigns.md, "What the watchdog times"): a
// backend's own time grows with its work, so a large case is not a timeout of a correct but slow
// backend. Each backend under test adds its work at the pace of a slow but correct kernel on its
// device; work is composition_cost's (harness/case.h: B·Hq·rows·cols·(Dqk + Dv) summed over the
// calls), and the pace counts the forward and the backward together. The zoo's naive CPU plugin
// does about 2e8 a second on this 2-core machine (tests/mutants/tiled_attention.cpp, fp32,
// B = 1, H = 4, S = 512, D = 64): the CPU pace is half that. A naive GPU kernel does a hundred
// times as much.
inline constexpr double kSlowCpuWorkPerSecond = 1e8, kSlowGpuWorkPerSecond = 1e10;

// The known deviations (--known) a campaign recorded with its state, for --resume.
struct RecordedKnown {
  bool recorded = false;  // the state names a known set, and `set` holds it
  KnownFindings set;
  // A state written before known sets were recorded, which counted known findings all the same.
  bool counted_without_set = false;
};

// What a campaign directory's state.json records (campaign/run_dir.h). A --resume reads and
// checks it once, before the campaign starts (read_saved_campaign); the campaign continues it.
struct SavedCampaign {
  uint64_t seed = 0;
  int shard = 0, shards = 1;
  std::optional<std::vector<std::string>> backends;  // absent in a state that did not record them
  std::optional<bool> minimize;                      // whether it minimizes its findings (absent: older state)
  // The CLI's flags that drew the case stream besides the seed and shard (CampaignOptions::
  // stream_flags); absent in a state written before they were recorded.
  std::optional<nlohmann::json> stream_flags;
  uint64_t next_k = 0;                               // the first case index not completed
  Coverage coverage;                                 // of the cases before next_k
  std::map<std::string, uint64_t> known_counts;      // known findings of the cases before next_k
  double seconds = 0;                                // the campaign's running time so far, every invocation summed
  RecordedKnown known;
  std::string bytes;  // state.json as read: the campaign refuses it if it changed before the lock
};
// Throws std::runtime_error "--resume: PATH: why" when there is no state, or it is damaged, or
// the known set it names is missing or damaged.
SavedCampaign read_saved_campaign(const std::string& out_dir);

// What a guided campaign needs from the generators (the CLI wires them up), for the backends the
// probe loaded.
struct CaseGuide {
  // A mutant of `parent` meant for `backend` (inside its envelope), from `seed` alone; nothing
  // when no valid one came (generators/mutate.h).
  std::function<std::optional<AimedCase>(const Case& parent, const std::string& backend, uint64_t seed)> mutate;
  // Another fresh draw for case index g (draw >= 1), aimed as case_stream's draw for g is.
  std::function<AimedCase(uint64_t g, uint64_t draw)> redraw;
  // A case of `cell` inside `backend`'s envelope, built from a draw (generators/envelope_cases.h,
  // case_in_cell), from `seed` alone; nothing where none came.
  std::function<std::optional<AimedCase>(const Case& drawn, const std::string& backend, const FeatureCell& cell, uint64_t seed)>
      in_cell;
};

// Guided campaigns (docs/campaigns.md, "Guided campaigns"). With the share s > 0, case g is
//   a mutant      with probability s (from a hash of seed and g), once the corpus holds an
//                 entry: a parent drawn from the corpus (GuidedCorpus::pick), mutated by
//                 CaseGuide::mutate for its slot's backend; case_stream's draw if none came;
//   steered       otherwise, with probability kSteerShare. A cell's load for a backend is the
//                 larger of its judged cases and the steered tries to build a case for it so far
//                 (cases in flight count, so parallel workers spread over the thin cells; a cell
//                 whose library declines what is built for it fills up too; a cell a try got no
//                 case for, such as a head dim above the stream's largest, is not tried again). Over the draw's target (or,
//                 for a blind draw, every backend), the cell inside the backend's envelope with the
//                 least load (the first in all_feature_cells' order among equals) gets a case built
//                 for it (CaseGuide::in_cell) when its load is below that of the draw's own cell;
//                 else, or when none came, the draw for g and kSteerDraws - 1 redraws, keeping the
//                 first whose feature cell (campaign/feature_cells.h) has the least load for a
//                 backend that would run it; a draw no backend would run counts as full;
//   case_stream's draw for g otherwise.
// Guidance keeps the stream's cost that of the fresh draws (a campaign is judged in cases per
// second): the work of a case is its composition's (harness/case.h, composition_cost), W the
// mean over the fresh draws so far. A mutant of work w > W is kept with probability W / w (else
// case g is case_stream's draw), and a case built for a cell or a steering redraw replaces the
// draw only when its work is at most M, the larger of the draw's and W (a cell that needs more
// work than that waits for a larger draw: its load grows with each try all the same).
// Every judged case is offered to the corpus. With one worker the stream is a function of the
// seed; with several, of the seed and of the order cases finish in (the corpus they see).
inline constexpr double kDefaultMutationShare = 0.3;  // `campaign`'s; `check` stays blind by default
inline constexpr double kSteerShare = 0.25;
inline constexpr int kSteerDraws = 4;
// The least time between two writes of corpus.json during a campaign (and once at its end).
inline constexpr double kCorpusSaveSeconds = 5;

struct CampaignOptions {
  uint64_t seed = 1;
  double budget_seconds = 60;  // stop claiming new cases after this long
  uint64_t budget_cases = 0;   // or after this many cases of this shard (0: no count limit)
  int shard = 0, shards = 1;   // this process runs global case indexes g with g % shards == shard
  std::vector<std::string> backends;
  std::string out_dir = "attnfuzz-out";
  std::optional<SavedCampaign> resume;  // --resume: the state to continue
  // The flags that drew the case stream besides the seed and shard (tier, case mix, shares,
  // bounds), as the CLI names them: recorded in state.json so that a --resume draws the same
  // stream (the CLI continues them, and refuses one named with another value). Null: none.
  nlohmann::json stream_flags;
  int jobs = 1;                      // worker processes
  std::vector<std::string> devices;  // one worker per entry, CUDA_VISIBLE_DEVICES=<entry>
  double timeout_seconds = 30;       // watchdog per case, before its growth with the case's work
  // The devices of the backends under test, one each (from the probe: run_campaign and run
  // --isolate set them): what case_watchdog_seconds adds for each. Empty: the watchdog does not grow.
  std::vector<Device> backend_devices;
  // A case that outlives the watchdog gets one more try in a fresh worker with this many times
  // the watchdog, and is a timeout finding only if it outlives that too: on a GPU a dozen
  // workers share one device, and a real-size case alone can take longer than the watchdog
  // (cuDNN builds a graph per call). run_campaign sets it when a backend runs on a GPU; 0: none.
  double confirm_timeout_factor = 0;
  int determinism_every = 4;         // run every backend twice on every n-th case
  bool minimize = true;
  // How long the minimization after the cases may take, all findings together (0: no limit):
  // when it is spent, each finding keeps the smallest case found so far and those not started
  // keep their unminimized representative. The CLI's default is max(--seconds, 60).
  double minimize_seconds = 0;
  bool quiet = false;
  // The case stream for the backends the probe loaded: global case index -> case and its aim
  // (deterministic). Called once, before the first case.
  std::function<std::function<AimedCase(uint64_t)>(const std::vector<BackendProfile>&)> case_stream;
  // Shrinking, for minimize_findings (the generators' shrinkers; harness sees interfaces only).
  std::function<std::vector<Case>(const Case&)> candidates;
  std::function<uint64_t(const Case&)> size;
  // argv of a worker: the attnfuzz executable and its `worker` subcommand with the backends.
  std::vector<std::string> worker_argv;
  // Known deviations (--known): findings they cover are counted, not recorded.
  KnownFindings known;
  // The share of cases drawn by mutation (above; 0: blind, case_stream's draws and nothing more).
  double mutation_share = 0;
  std::function<CaseGuide(const std::vector<BackendProfile>&)> guide;
};

struct CampaignSummary {
  uint64_t cases = 0;  // cases run by this invocation (resumed ones included in cases_total)
  // Every completed case of the stream: the completed prefix (resumed parts included) and the
  // cases completed beyond it, the population `coverage` and `known` count.
  uint64_t cases_total = 0;
  uint64_t judged = 0;  // of `cases`: judged ones (campaign/coverage.h); the rate counts these
  double seconds = 0;
  // The rate after warm-up: judged cases over the invocation's second half (the first holds
  // the workers' start and most compiles: a new kernel compiles in seconds to a minute), when
  // the invocation ran at least kSteadyMinSeconds.
  static constexpr double kSteadyMinSeconds = 20;
  uint64_t steady_judged = 0;
  double steady_seconds = 0;
  std::map<std::string, int> findings_by_class;
  std::vector<std::string> signatures;  // sorted
  // Findings covered by a known deviation, per deviation id (over cases_total).
  std::map<std::string, uint64_t> known;
  uint64_t next_index = 0;
  // What ran, was skipped or errored, per backend and composition, over cases_total.
  Coverage coverage;
  // A guided campaign's mutants and raises (every invocation's), and its corpus's entries.
  GuidedCounts guided;
  size_t corpus_entries = 0;
};

// Starts one worker as the campaign would and has it load every backend; returns what each
// reports: its name (plugin:/x.so -> plugin.x), device and envelope. Throws BackendLoadError.
std::vector<BackendProfile> probe_backends(const CampaignOptions& opt);
// The same on a worker the caller keeps (`run --isolate` then runs its case there).
std::vector<BackendProfile> probe_backends(WorkerProcess& proc, const CampaignOptions& opt);

// Runs the campaign; writes findings/, state.json, summary.json into out_dir, holding
// out_dir/lock (campaign/dir_lock.h) throughout. Throws std::runtime_error with one line when
// the directory is in use, belongs to another campaign, or cannot be written (a full disk).
CampaignSummary run_campaign(const CampaignOptions& opt);
// Minimizes every recorded finding without a .min.json yet (through a worker).
// minimize_isolated: the minimizer (campaign/minimize.h) over isolated_judge.
void minimize_findings(const CampaignOptions& opt);
// One case in the isolated worker `w` (restarted after a crash, a hang or a GPU error, so a fault
// cannot leak into the next case's verdict): its findings, or the death it caused. When
// `coverage` is given, the case's outcomes per backend are added to it. A request abandoned
// (WorkerProcess::abandon_when) gives no findings, adds nothing and sets *abandoned. A worker
// that ran out of memory on the case judged nothing: no findings, the case counted unjudged
// with the reason, and *out_of_memory set (host memory), or *device_out_of_memory (an oracle's
// device allocation).
// `runs`, when given, receives what each backend ran (with its limit ratios), skipped or errored.
// The watchdog of case c: timeout_seconds, plus for each backend in backend_devices its runs
// (2 with the determinism check, else 1) times the case's work at its device's slow pace, at
// most watchdog_growth_limit_seconds() (harness/worker.h) more.
double case_watchdog_seconds(const Case& c, bool check_determinism, const CampaignOptions& o);

std::vector<Reproducer> run_case(WorkerProcess& w, const Case& c, int64_t index, bool check_determinism, const CampaignOptions& opt,
                                 Coverage* coverage = nullptr, bool* abandoned = nullptr, bool* out_of_memory = nullptr,
                                 std::vector<RunOutcome>* runs = nullptr, bool* device_out_of_memory = nullptr);
// The judge (campaign/minimize.h) that runs each case in the isolated worker `w`, with this watchdog.
Judge isolated_judge(WorkerProcess& w, const CampaignOptions& opt, bool check_determinism, double timeout_seconds);
Reproducer minimize_isolated(WorkerProcess& proc, const Reproducer& r, const CampaignOptions& opt, ShrinkReport* report = nullptr,
                             const OutOfTime& out_of_time = {});
// The global index of the k-th case of a shard.
inline uint64_t global_case_index(uint64_t k, int shard, int shards) {
  return k * static_cast<uint64_t>(shards) + static_cast<uint64_t>(shard);
}

// What summary.json records of a campaign (campaign/run_dir.h writes it).
rundir::Summary summary_of(const CampaignSummary& s, const CampaignOptions& opt);

}  // namespace attnfuzz
