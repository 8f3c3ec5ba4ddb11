// `attnfuzz campaign`: generated cases through every backend, each in an isolated worker,
// findings recorded (campaign/campaign.h).
#include <memory>

#include "cli/arg_checks.h"
#include "cli/campaign_args.h"
#include "cli/commands.h"

namespace attnfuzz::cli {

void add_campaign_command(CLI::App& app, int& exit_code) {
  auto ca = std::make_shared<CampaignArgs>();
  CLI::App* campaign = app.add_subcommand("campaign", "Fuzz campaign: generated cases through every backend, isolated, recorded");
  add_campaign_flags(campaign, *ca);
  campaign->add_option("--seconds", ca->seconds, "time budget")->check(seconds_in(kMinBudgetSeconds, kMaxBudgetSeconds));
  campaign->add_option("--cases", ca->cases, "case budget of this shard (0: time only)")->check(strict_unsigned());
  campaign->add_flag("--resume", ca->resume, "continue the campaign recorded in --out");
  campaign->callback([ca, &exit_code] { exit_code = campaign_command(*ca); });
}

}  // namespace attnfuzz::cli
