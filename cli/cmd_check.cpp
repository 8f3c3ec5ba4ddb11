// `attnfuzz check`: the pre-merge check, a campaign with a fixed seed and case budget that
// starts from nothing and writes JUnit and JSON.
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "campaign/junit.h"
#include "cli/campaign_args.h"
#include "cli/commands.h"
#include "cli/coverage_output.h"

namespace attnfuzz::cli {
namespace fs = std::filesystem;
using nlohmann::json;

void add_check_command(CLI::App& app, int& exit_code) {
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
    for (const auto& sig : s.at("signatures"))
      cases.push_back({"attnfuzz.check", sig.get<std::string>(), "divergence: " + sig.get<std::string>(), ""});
    cases.push_back({"attnfuzz.check", "cases=" + std::to_string(s.value("cases", 0)), "", ""});
    // Known deviations pass the check and are shown: a passing test case each, its count as output.
    if (s.contains("known_findings"))
      for (const auto& [id, n] : s.at("known_findings").items())
        cases.push_back({"attnfuzz.check", "known " + id, "", "known deviation, " + std::to_string(n.get<uint64_t>()) + " finding(s)"});
    for (const auto& c : coverage_junit_cases(Coverage::from_json(s.value("coverage", json::object())))) cases.push_back(c);
    if (untested) exit_code = kExitUntested;
    write_file_atomic(ch->junit.empty() ? ch->c.out + "/junit.xml" : ch->junit, junit_xml("attnfuzz.check", cases));
    if (!ch->json_out.empty()) fs::copy_file(ch->c.out + "/summary.json", ch->json_out, fs::copy_options::overwrite_existing);
  });
}

}  // namespace attnfuzz::cli
