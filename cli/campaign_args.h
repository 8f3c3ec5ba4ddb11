#pragma once
// What `campaign` and `check` share: their flags, the campaign those flags describe, and
// running it with the summary lines both print.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "campaign/campaign.h"
#include "generators/domain.h"
#include "generators/envelope_cases.h"

namespace attnfuzz::cli {

// The most worker processes a campaign starts: --jobs, or one per --devices id.
inline constexpr int kMaxJobs = 256;

struct CampaignArgs {
  uint64_t seed = 1;
  double seconds = 30;
  double minimize_seconds = -1;  // -1: max(seconds, 60); 0: no limit
  uint64_t cases = 0;
  std::string shard = "0/1";
  // Whether --seed and --shard were given: --resume takes the recorded ones otherwise.
  bool seed_given = false, shard_given = false;
  std::vector<std::string> backends;
  std::string out;  // default: attnfuzz-runs/<UTC time>
  bool resume = false, no_minimize = false, quiet = false;
  int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string devices;
  double timeout = 30;
  // auto: real when a backend under test computes on a GPU, else small (the CPU default).
  std::string tier = "auto";
  // auto: aimed at the backends' envelopes when one computes on a GPU, else blind.
  std::string case_mix = "auto";
  double edge_share = kDefaultEdgeShare;
  // The share of cases with values that break kernels (docs/fuzzing.md); unset: kCpuBreakingShare
  // or kGpuBreakingShare, with the kinds their defaults leave out.
  std::optional<double> breaking_share;
  // The share of cases with a score bias; unset: kCpuBiasShare on the CPU, 0 on a GPU.
  std::optional<double> bias_share;
  std::optional<double> ragged_share;
  // The share of cases drawn by mutating the guided corpus (campaign/campaign.h; 0: blind).
  double mutation_share = kDefaultMutationShare;
  int64_t max_seq = 0;             // 0: the tier's
  int64_t max_dim = 0;             // 0: the tier's
  std::vector<std::string> known;  // reproducers of known deviations (files or directories)
  // Which of the case stream's flags (stream_flags_of) were given: --resume takes the recorded
  // value of the others, and refuses one given with another value.
  std::set<std::string> stream_flags_given;
};

// The flags above that draw the case stream besides --seed and --shard, keyed by their names
// without the dashes ("tier", "ragged-share"; a share left to its default is null), as state.json
// records them.
nlohmann::json stream_flags_of(const CampaignArgs& a);

// What a worker's run of a case of `shape` through these backends keeps in host memory, for the
// memory budget of the cases aimed at them: the oracle set a worker would choose
// (expected_oracle_device) and the most any of them keeps.
HostWork host_work_of(const std::vector<BackendProfile>& backends, const Shape& shape);

void add_campaign_flags(CLI::App* cmd, CampaignArgs& a);
// Throws std::invalid_argument / std::runtime_error on a bad flag or an unreadable --known.
CampaignOptions to_options(const CampaignArgs& a);
// Runs the campaign and prints its summary; the exit code. `untested`, when given, is set
// when some backend ran no case.
int campaign_command(const CampaignArgs& a, bool* untested = nullptr);

}  // namespace attnfuzz::cli
