#include "cli/coverage_output.h"

#include <fmt/core.h>

#include <cstdio>
#include <string>

#include "campaign/feature_cells.h"

namespace attnfuzz::cli {

void print_coverage(const Coverage& c) {
  for (const auto& [b, n] : c.backends()) {
    std::string comps;
    if (auto it = c.compositions().find(b); it != c.compositions().end())
      for (const auto& [comp, k] : it->second)
        comps += fmt::format("{}{} {}/{}/{}", comps.empty() ? "" : ", ", comp, k.ran, k.skipped, k.errored);
    fmt::print("coverage  {}: {} ran, {} skipped, {} errored ({})\n", b, n.ran, n.skipped, n.errored, comps.empty() ? "-" : comps);
  }
  // How the cases were aimed, and what share of those inside its envelope each target ran.
  for (const auto& [b, a] : c.aims()) {
    std::string clauses;
    for (const auto& [clause, n] : a.edge_by_clause) clauses += fmt::format("{}{} {}", clauses.empty() ? "" : ", ", clause, n);
    fmt::print("aimed     {}: {} inside, {} ran ({:.0f}%); {} just outside, {} ran ({})\n", b, a.inside, a.inside_ran,
               a.inside ? 100.0 * static_cast<double>(a.inside_ran) / static_cast<double>(a.inside) : 0.0, a.edge, a.edge_ran,
               clauses.empty() ? "-" : clauses);
  }
  // The feature map (campaign/feature_cells.h): how many of the cells inside each envelope were judged.
  for (const auto& [b, n] : c.backends()) {
    const auto outside = c.outside_cells().find(b);
    const auto cells = c.cells().find(b);
    const size_t out = outside == c.outside_cells().end() ? 0 : outside->second.size();
    size_t judged = 0;
    if (cells != c.cells().end())
      for (const auto& [cell, k] : cells->second) judged += k > 0 && (outside == c.outside_cells().end() || !outside->second.count(cell));
    if (n.ran || out)
      fmt::print("cells     {}: {} of the {} feature cells inside its envelope judged ({} outside it; report.html draws the map)\n", b, judged,
                 all_cells().size() - out, out);
  }
  std::fflush(stdout);
  for (const auto& w : c.warnings()) fmt::print(stderr, "attnfuzz: WARNING: {}\n", w);
}

std::vector<JUnitCase> coverage_junit_cases(const Coverage& c) {
  std::vector<JUnitCase> out;
  for (const auto& [b, n] : c.backends()) {
    std::string text = fmt::format("ran {}, skipped {}, errored {} (cases)", n.ran, n.skipped, n.errored);
    if (auto it = c.compositions().find(b); it != c.compositions().end())
      for (const auto& [comp, k] : it->second)
        text += fmt::format("\n{}: ran {}, skipped {}, errored {}", comp, k.ran, k.skipped, k.errored);
    for (const auto& [group, rc] : c.top_reasons(b, 5)) text += fmt::format("\n{}x {}", rc.count, rc.example);
    std::string failure;
    if (n.ran == 0) {
      failure = fmt::format("ran no case: {} skipped, {} errored", n.skipped, n.errored);
      if (const auto top = c.top_reasons(b, 1); !top.empty()) failure += "; most often: " + top[0].second.example;
    }
    out.push_back({"attnfuzz.check.coverage", b, failure, text});
  }
  if (const CoverageCounts& e = c.case_errors(); e.errored) {
    std::string text = fmt::format("{} case(s) the worker could not judge", e.errored);
    for (const auto& [group, rc] : e.reasons) text += fmt::format("\n{}x {}", rc.count, rc.example);
    out.push_back({"attnfuzz.check.coverage", "unjudged cases", "", text});
  }
  return out;
}

}  // namespace attnfuzz::cli
