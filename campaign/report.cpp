#include "campaign/report.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "campaign/coverage.h"
#include "campaign/dir_lock.h"
#include "campaign/feature_cells.h"
#include "campaign/known.h"
#include "campaign/output_file.h"
#include "campaign/run_dir.h"
#include "harness/case_json.h"
#include "harness/compose.h"
#include "harness/error_model.h"
#include "harness/tensors.h"
#include "harness/errors.h"
#include "harness/inputs.h"
#include "harness/isolated_call.h"
#include "harness/json_input.h"

namespace attnfuzz {
namespace fs = std::filesystem;

namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

std::string num(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}

// Histogram of log10(error) with the tolerance bound as a red line.
std::string histogram_svg(const ErrorProfile& p) {
  const int W = 420, H = 160, bins = 40;
  std::vector<double> logs;
  for (double e : p.abs_errors) logs.push_back(std::log10(std::max(e, 1e-18)));
  const double bound = std::log10(std::max(p.bound_max, 1e-18));
  double lo = bound, hi = bound;
  for (double l : logs) {
    lo = std::min(lo, l);
    hi = std::max(hi, l);
  }
  lo -= 0.5;
  hi += 0.5;
  std::vector<int> count(bins, 0);
  for (double l : logs) ++count[std::min(bins - 1, static_cast<int>((l - lo) / (hi - lo) * bins))];
  const int peak = std::max(1, *std::max_element(count.begin(), count.end()));
  std::ostringstream s;
  s << "<svg width='" << W << "' height='" << H + 30 << "'>";
  s << "<rect x='0' y='0' width='" << W << "' height='" << H << "' fill='#fafafa' stroke='#ccc'/>";
  for (int i = 0; i < bins; ++i) {
    const double h = static_cast<double>(count[i]) / peak * (H - 10);
    s << "<rect x='" << i * W / bins + 1 << "' y='" << H - h << "' width='" << W / bins - 2 << "' height='" << h << "' fill='#4a7bd0'/>";
  }
  const double bx = (bound - lo) / (hi - lo) * W;
  s << "<line x1='" << bx << "' y1='0' x2='" << bx << "' y2='" << H << "' stroke='#d02020' stroke-width='2'/>";
  s << "<text x='" << std::min(bx + 4, W - 120.0) << "' y='14' font-size='11' fill='#d02020'>bound " << num(p.bound_max) << "</text>";
  s << "<text x='0' y='" << H + 14 << "' font-size='11'>1e" << num(lo) << "</text>";
  s << "<text x='" << W - 60 << "' y='" << H + 14 << "' font-size='11'>1e" << num(hi) << "</text>";
  s << "<text x='" << W / 2 - 80 << "' y='" << H + 26 << "' font-size='11'>|error| per element (log scale)</text></svg>";
  return s.str();
}

// Max error per index, as bars, against the bound.
std::string profile_svg(const std::vector<double>& v, double bound, const std::string& label) {
  const int W = 420, H = 120;
  double peak = bound;
  for (double x : v) peak = std::max(peak, x);
  if (peak <= 0) peak = 1;
  std::ostringstream s;
  s << "<svg width='" << W << "' height='" << H + 20 << "'>";
  s << "<rect x='0' y='0' width='" << W << "' height='" << H << "' fill='#fafafa' stroke='#ccc'/>";
  const double bw = static_cast<double>(W) / std::max<size_t>(1, v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double h = v[i] / peak * (H - 5);
    s << "<rect x='" << i * bw << "' y='" << H - h << "' width='" << std::max(1.0, bw - 1) << "' height='" << h << "' fill='"
      << (v[i] > bound ? "#d05030" : "#4a9a50") << "'/>";
  }
  const double by = H - bound / peak * (H - 5);
  s << "<line x1='0' y1='" << by << "' x2='" << W << "' y2='" << by << "' stroke='#d02020' stroke-dasharray='4'/>";
  s << "<text x='4' y='" << H + 14 << "' font-size='11'>" << esc(label) << " (0.." << v.size() - (v.empty() ? 0 : 1) << "), max "
    << num(peak) << "</text></svg>";
  return s.str();
}

// The feature map (campaign/feature_cells.h) as a heatmap per backend: rows dtype x mask,
// columns composition x head dim, each cell its judged cases, shaded by their logarithm; an
// empty cell inside the backend's envelope is red, one outside it grey with the reason. Then the
// side features' counts.
std::string feature_map_html(const Coverage& c) {
  if (c.cells().empty() && c.outside_cells().empty()) return {};
  const std::vector<CellAxis>& axes = cell_axes();
  std::ostringstream h;
  h << "<h3>Feature map</h3><p>Judged cases per cell of dtype &times; mask &times; composition &times; head dim "
       "(docs/campaigns.md, \"Feature map\"). Red: inside the backend's envelope and never judged; grey: outside it.</p>";
  for (const auto& [b, counts] : c.backends()) {
    if (counts.total() == 0) continue;
    const auto cells = c.cells().find(b);
    const auto outside = c.outside_cells().find(b);
    uint64_t peak = 1;
    if (cells != c.cells().end())
      for (const auto& [cell, n] : cells->second) peak = std::max(peak, n);
    h << "<h4>" << esc(b) << "</h4><table class='heat'><tr><th></th>";
    for (const char* comp : axes[2].values)
      for (const char* d : axes[3].values) h << "<th>" << comp << "<br>" << d << "</th>";
    h << "</tr>";
    for (const char* dtype : axes[0].values)
      for (const char* mask : axes[1].values) {
        h << "<tr><th>" << dtype << " " << mask << "</th>";
        for (const char* comp : axes[2].values)
          for (const char* d : axes[3].values) {
            const std::string cell = std::string(dtype) + "/" + mask + "/" + comp + "/" + d;
            const uint64_t n = cells == c.cells().end() || !cells->second.count(cell) ? 0 : cells->second.at(cell);
            if (outside != c.outside_cells().end() && outside->second.count(cell)) {
              h << "<td style='background:#ddd;color:#777' title='outside its envelope: " << esc(outside->second.at(cell)) << "'>"
                << (n ? std::to_string(n) : "&mdash;") << "</td>";
            } else if (n == 0) {
              h << "<td style='background:#f4a4a4' title='never judged'>0</td>";
            } else {
              const double shade = std::log1p(static_cast<double>(n)) / std::log1p(static_cast<double>(peak));
              const int g = 235 - static_cast<int>(120 * shade);
              h << "<td style='background:rgb(" << g << ",240," << g << ")'>" << n << "</td>";
            }
          }
        h << "</tr>";
      }
    h << "</table>";
    if (const auto sides = c.sides().find(b); sides != c.sides().end()) {
      h << "<p>";
      for (const CaseFeature& f : side_features()) {
        h << "<b>" << f.name << "</b>";
        const auto values = sides->second.find(f.name);
        for (const char* v : f.values) {
          const uint64_t n = values == sides->second.end() || !values->second.count(v) ? 0 : values->second.at(v);
          h << " " << v << " " << n;
        }
        h << "&nbsp;&nbsp; ";
      }
      h << "</p>";
    }
  }
  return h.str();
}

// What was really tested: a banner per backend that ran nothing, then cases ran / skipped /
// errored per backend and composition class, with the top reasons.
std::string coverage_html(const Coverage& c) {
  std::ostringstream h;
  h << "<h2>Coverage</h2>";
  for (const auto& w : c.warnings()) h << "<p class='warn'>WARNING: " << esc(w) << "</p>";
  h << "<table><tr><th>backend</th><th>composition</th><th>ran</th><th>skipped</th><th>errored</th><th>top skip/error reasons</th></tr>";
  auto row = [&](const std::string& b, const std::string& comp, const CoverageCounts& n, const std::string& reasons) {
    h << "<tr" << (n.ran == 0 ? " class='untested'" : "") << "><td>" << esc(b) << "</td><td>" << esc(comp) << "</td><td>" << n.ran
      << "</td><td>" << n.skipped << "</td><td>" << n.errored << "</td><td>" << reasons << "</td></tr>";
  };
  for (const auto& [b, n] : c.backends()) {
    std::string reasons;
    for (const auto& [group, rc] : c.top_reasons(b, 5)) reasons += std::to_string(rc.count) + "&times; " + esc(rc.example) + "<br>";
    row(b, "all (per case)", n, reasons);
    if (auto it = c.compositions().find(b); it != c.compositions().end())
      for (const auto& [comp, k] : it->second) row(b, comp, k, "");
  }
  h << "</table>";
  // The case mix (generators/envelope_cases.h): per target, its share of the cases aimed inside
  // its envelope that it ran, and the cases just outside one clause.
  if (!c.aims().empty()) {
    h << "<h3>Case mix</h3><p>" << c.blind_cases() << " blind case(s)</p>"
      << "<table><tr><th>target</th><th>inside</th><th>ran</th><th>share ran</th><th>just outside</th><th>ran</th>"
         "<th>by clause</th></tr>";
    for (const auto& [b, a] : c.aims()) {
      const double share = a.inside ? static_cast<double>(a.inside_ran) / static_cast<double>(a.inside) : 0.0;
      std::string clauses;
      for (const auto& [clause, n] : a.edge_by_clause) clauses += esc(clause) + " " + std::to_string(n) + "<br>";
      h << "<tr" << (share < 0.8 ? " class='untested'" : "") << "><td>" << esc(b) << "</td><td>" << a.inside << "</td><td>"
        << a.inside_ran << "</td><td>" << static_cast<int>(100 * share + 0.5) << "%</td><td>" << a.edge << "</td><td>" << a.edge_ran
        << "</td><td>" << clauses << "</td></tr>";
    }
    h << "</table>";
  }
  h << feature_map_html(c);
  return h.str();
}

}  // namespace

namespace {

// An ErrorProfile through the isolated call's pipe: the tensor's name, bound_max, then the
// three vectors, each as its length and its doubles.
std::string serialize(const ErrorProfile& p) {
  std::string out;
  auto put = [&out](const void* data, size_t n) { out.append(static_cast<const char*>(data), n); };
  const uint64_t name_len = p.tensor.size();
  put(&name_len, sizeof name_len);
  put(p.tensor.data(), p.tensor.size());
  put(&p.bound_max, sizeof p.bound_max);
  for (const std::vector<double>* v : {&p.abs_errors, &p.by_position, &p.by_feature}) {
    const uint64_t n = v->size();
    put(&n, sizeof n);
    put(v->data(), n * sizeof(double));
  }
  return out;
}

ErrorProfile deserialize(const std::string& s) {
  size_t at = 0;
  auto take = [&](void* data, size_t n) {
    if (s.size() - at < n) throw std::runtime_error("a truncated error profile from the re-run");
    std::memcpy(data, s.data() + at, n);
    at += n;
  };
  ErrorProfile p;
  uint64_t name_len = 0;
  take(&name_len, sizeof name_len);
  if (name_len > s.size()) throw std::runtime_error("a malformed error profile from the re-run");
  p.tensor.resize(name_len);
  take(p.tensor.data(), name_len);
  take(&p.bound_max, sizeof p.bound_max);
  for (std::vector<double>* v : {&p.abs_errors, &p.by_position, &p.by_feature}) {
    uint64_t n = 0;
    take(&n, sizeof n);
    if (n > s.size() / sizeof(double)) throw std::runtime_error("a malformed error profile from the re-run");
    v->resize(n);
    take(v->data(), n * sizeof(double));
  }
  return p;
}

}  // namespace

std::optional<ErrorProfile> error_profile(const Reproducer& r, const ReportServices& services, std::string* why) {
  const Signature& sig = r.finding.signature;
  const std::optional<TensorId> output = sig.tensor && is_output(*sig.tensor) ? sig.tensor : std::nullopt;
  if (sig.cls == FindingClass::crash || sig.cls == FindingClass::timeout || !output) {
    *why = "the finding has no error tensor (a crash, a timeout, or a finding about no tensor)";
    return std::nullopt;
  }
  if (services.rerun_timeout_s > 0) {
    ReportServices in_child = services;
    in_child.rerun_timeout_s = 0;
    const IsolatedCall call = call_isolated(
        [&] {
          std::string child_why;
          const std::optional<ErrorProfile> p = error_profile(r, in_child, &child_why);
          if (!p) throw std::runtime_error(child_why);
          return serialize(*p);
        },
        services.rerun_timeout_s);
    using S = IsolatedCall::Status;
    if (call.status == S::ok) {
      try {
        return deserialize(call.payload);
      } catch (const std::exception& e) {
        *why = std::string("it could not be re-run here: ") + e.what();
        return std::nullopt;
      }
    }
    *why = call.status == S::failed ? call.payload
                                    : std::string("it could not be re-run here: the re-run ") +
                                          (call.status == S::timed_out ? "hung: " : "crashed: ") + call.detail;
    return std::nullopt;
  }
  // A picture is a courtesy: a finding that cannot be re-run here gets none, and the report
  // says why; the report itself never fails for it.
  try {
    const std::unique_ptr<Backend> be = services.load_blamed(r);
    const std::unique_ptr<Backend> ref = services.reference();
    const Inputs in = generate_inputs(r.c);
    const Composition comp = sig.composition == CompositionClass::single ? Composition{} : r.c.composition;
    const ComposedResult want = run_composition(*ref, r.c, in, Composition{});
    const ComposedResult got = run_composition(*be, r.c, in, comp);
    const Tensor &a = got[*output], &b = want[*output];
    ErrorProfile p;
    p.tensor = sig.tensor_name();
    const int64_t S = a.shape[2], D = a.shape.size() > 3 ? a.shape[3] : 1;
    p.by_position.assign(static_cast<size_t>(S), 0.0);
    p.by_feature.assign(static_cast<size_t>(D), 0.0);
    for (size_t i = 0; i < a.numel(); ++i) {
      double e = std::fabs(a.data[i] - b.data[i]);
      if (std::isinf(a.data[i]) && a.data[i] == b.data[i]) e = 0;
      if (std::isnan(e) || std::isinf(e)) e = 1e300;
      p.abs_errors.push_back(e);
      const size_t s = static_cast<size_t>((static_cast<int64_t>(i) / D) % S);
      const size_t d = static_cast<size_t>(static_cast<int64_t>(i) % D);
      p.by_position[s] = std::max(p.by_position[s], e);
      p.by_feature[d] = std::max(p.by_feature[d], e);
    }
    p.bound_max = r.finding.metric(FindingMetric::bound_max).value_or(0.0);
    return p;
  } catch (const std::exception& e) {
    *why = std::string("it could not be re-run here: ") + e.what();
    return std::nullopt;
  }
}

namespace {

// Judged and unjudged cases (campaign/coverage.h), and the rate over judged cases when the
// campaign's state says how long it ran (summary.json has no times).
std::string judged_rows(const nlohmann::json& summary, const std::string& run_dir) {
  if (!summary.contains("cases_judged") || !summary["cases_judged"].is_number_unsigned()) return {};
  const uint64_t judged = summary["cases_judged"].get<uint64_t>();
  std::ostringstream h;
  h << "<tr><th>&nbsp;&nbsp;judged</th><td>" << judged;
  if (const std::optional<double> seconds = rundir::campaign_seconds(run_dir)) {
    char rate[96];
    std::snprintf(rate, sizeof rate, " (%.1f judged cases/s over %.0f s)", static_cast<double>(judged) / *seconds, *seconds);
    h << rate;
  }
  h << "</td></tr>";
  const nlohmann::json unjudged = summary.value("coverage", nlohmann::json::object()).value("unjudged_cases", nlohmann::json::object());
  h << "<tr><th>&nbsp;&nbsp;unjudged</th><td>" << summary.value("cases_unjudged", uint64_t{0}) << ": "
    << unjudged.value("no_backend_ran", uint64_t{0}) << " in which no backend ran (every one skipped or errored), "
    << unjudged.value("errored", uint64_t{0}) << " the worker could not judge</td></tr>";
  return h.str();
}

}  // namespace

namespace {

// Findings grouped by what most likely caused them: the same backend, the same family of
// tensors (forward O/LSE, backward dQ/dK/dV, or none: an error, a crash) and the same case
// properties among the known deviations' predicates (campaign/known.h) and the surround. One
// root cause usually shows as one group of several buckets (F-1: torch.cudnn, every tensor,
// unaligned rows).
std::string root_causes_html(const std::vector<std::pair<std::string, Reproducer>>& shown) {
  static const std::vector<std::pair<std::string, CasePredicate>> triggers = [] {
    std::vector<std::pair<std::string, CasePredicate>> t;
    for (const char* term : {"unaligned_rows(16)", "masked_rows", "head_dims_differ"}) t.emplace_back(term, parse_case_predicate(term));
    t.emplace_back("surround_not_zero", [](const Case& c) { return c.layouts.surround.fill != Surround::Fill::zero; });
    return t;
  }();
  auto family = [](std::optional<TensorId> t) {
    if (!t || !is_output(*t)) return std::string("no tensor");
    return std::string(kind_of(*t) == TensorKind::output ? "forward" : "backward");
  };
  std::map<std::string, std::vector<size_t>> groups;
  for (size_t i = 0; i < shown.size(); ++i) {
    const Reproducer& r = shown[i].second;
    std::string when;
    for (const auto& [name, holds] : triggers)
      if (holds(r.c)) when += (when.empty() ? "" : " and ") + name;
    groups[r.finding.signature.backend + " | " + family(r.finding.signature.tensor) + " | " + (when.empty() ? "none of these" : when)]
        .push_back(i);
  }
  std::vector<std::pair<std::string, std::vector<size_t>>> sorted(groups.begin(), groups.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  std::ostringstream h;
  h << "<h2>Likely root causes</h2><p>Findings of one backend, one family of tensors and the same case properties ("
       "unaligned_rows(16), masked_rows, head_dims_differ, surround_not_zero) are grouped: a group is most likely one bug.</p>"
       "<table><tr><th>backend</th><th>tensors</th><th>cases with</th><th>findings</th></tr>";
  for (const auto& [key, members] : sorted) {
    const size_t a = key.find(" | "), b = key.find(" | ", a + 3);
    h << "<tr><td>" << esc(key.substr(0, a)) << "</td><td>" << esc(key.substr(a + 3, b - a - 3)) << "</td><td>" << esc(key.substr(b + 3))
      << "</td><td>";
    for (size_t m = 0; m < members.size(); ++m) h << (m ? " " : "") << "<a href='#f" << members[m] << "'>" << members[m] + 1 << "</a>";
    h << "</td></tr>";
  }
  h << "</table>";
  return h.str();
}

}  // namespace

std::string write_report(const std::string& run_dir, const ReportServices& services, std::vector<std::string>* left_out) {
  nlohmann::json summary = nlohmann::json::object();
  std::error_code ec;
  const std::string summary_file = rundir::summary_path(run_dir);
  if (!fs::exists(summary_file, ec) && !fs::is_directory(rundir::findings_dir(run_dir), ec))
    throw std::runtime_error(run_dir + ": not a campaign output directory (no summary.json, no findings/)");
  if (fs::exists(summary_file, ec)) {
    try {
      summary = parse_strict_json(read_input_file(summary_file));
    } catch (const std::exception& e) {
      throw std::runtime_error(summary_file + ": " + e.what());
    }
    if (!summary.is_object() || summary.value("format", "") != rundir::kSummaryFormat)
      throw std::runtime_error(summary_file + ": not an " + rundir::kSummaryFormat + " file");
  }
  // The report is written into the campaign's directory: never while another process's campaign
  // runs there (a campaign's own final report joins the lock it holds, campaign/dir_lock.h).
  const DirLock lock(run_dir);
  const std::vector<std::string> files = rundir::finding_files(rundir::findings_dir(run_dir));

  std::ostringstream h;
  h << "<!doctype html><html><head><meta charset='utf-8'><title>attnfuzz report: " << esc(run_dir) << "</title><style>"
    << "body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;"
    << "font-size:13px;text-align:left}th{background:#eee}.finding{border:1px solid #bbb;border-radius:6px;padding:12px;margin:16px 0}"
    << "pre{background:#f4f4f4;padding:8px;overflow:auto;max-height:240px;font-size:12px}.cls{font-weight:bold;color:#b02020}"
    << ".pics{display:flex;gap:16px;flex-wrap:wrap}"
    << ".warn{background:#fde2e2;border:2px solid #b02020;padding:8px;font-weight:bold}.untested "
       "td{background:#fde2e2}</style></head><body>";
  h << "<h1>attnfuzz report</h1><p>Run directory: <code>" << esc(run_dir) << "</code></p>";
  h << "<h2>Summary</h2><table><tr><th>cases</th><td>" << summary.value("cases", 0) << "</td></tr>";
  h << judged_rows(summary, run_dir);
  h << "<tr><th>seed / shard</th><td>" << summary.value("seed", uint64_t{0}) << " / " << esc(summary.value("shard", std::string("-")))
    << "</td></tr>";
  h << "<tr><th>backends</th><td>";
  if (summary.contains("backends"))
    for (const auto& b : summary["backends"]) h << esc(b.get<std::string>()) << "<br>";
  h << "</td></tr><tr><th>findings</th><td>" << files.size() << "</td></tr>";
  if (summary.contains("findings_by_class"))
    for (auto it = summary["findings_by_class"].begin(); it != summary["findings_by_class"].end(); ++it)
      h << "<tr><th>&nbsp;&nbsp;" << esc(it.key()) << "</th><td>" << it.value() << "</td></tr>";
  // Findings a known deviation covers (campaign --known): counted, not recorded above.
  if (summary.contains("known_findings") && summary["known_findings"].is_object())
    for (auto it = summary["known_findings"].begin(); it != summary["known_findings"].end(); ++it)
      h << "<tr><th>known " << esc(it.key()) << "</th><td>" << it.value() << " finding(s), not recorded</td></tr>";
  h << "</table>";
  if (summary.contains("coverage")) h << coverage_html(Coverage::from_json(summary["coverage"]));

  h << "<h2>Findings</h2><table><tr><th>#</th><th>backend</th><th>composition</th><th>tensor</th><th>class</th><th>dtype</th><th>mask</"
       "th><th>minimized shape</th></tr>";
  std::vector<std::pair<std::string, Reproducer>> shown;
  std::vector<std::string> unreadable;
  for (const auto& f : files) {
    const std::string min = rundir::minimized_name(f);
    const std::string path = fs::exists(min) ? min : f;
    try {
      shown.emplace_back(path, load_repro(path));
    } catch (const std::exception& e) {
      unreadable.push_back(message_safe(path, 300) + " left out: " + e.what());
    }
  }
  for (size_t i = 0; i < shown.size(); ++i) {
    const Signature& s = shown[i].second.finding.signature;
    h << "<tr><td><a href='#f" << i << "'>" << i + 1 << "</a></td><td>" << esc(s.backend) << "</td><td>" << esc(std::string(to_string(s.composition)))
      << "</td><td>" << esc(s.tensor_name()) << "</td><td class='cls'>" << esc(to_string(s.cls)) << "</td><td>" << esc(std::string(to_string(s.dtype))) << "</td><td>"
      << esc(s.mask) << "</td><td>" << esc(describe_shape(shown[i].second.c.shape)) << "</td></tr>";
  }
  h << "</table>";
  h << root_causes_html(shown);
  for (const auto& why : unreadable) h << "<p class='warn'>WARNING: " << esc(why) << "</p>";
  if (left_out) *left_out = unreadable;
  for (size_t i = 0; i < shown.size(); ++i) {
    const auto& [path, r] = shown[i];
    h << "<div class='finding' id='f" << i << "'><h3>" << i + 1 << ". " << esc(r.finding.signature.to_string()) << "</h3>";
    h << "<p>" << esc(r.finding.detail) << "</p>";
    h << "<p>Replay: <code>attnfuzz replay " << esc(path) << "</code> &nbsp; Run: <code>attnfuzz run " << esc(path) << " --backends ";
    for (size_t b = 0; b < r.backends.size(); ++b) h << (b ? "," : "") << esc(r.backends[b]);
    h << "</code></p>";
    std::string why;
    if (auto p = error_profile(r, services, &why)) {
      h << "<div class='pics'><div><b>error histogram (" << esc(p->tensor) << ")</b><br>" << histogram_svg(*p) << "</div>";
      h << "<div><b>max error along the sequence</b><br>" << profile_svg(p->by_position, p->bound_max, "position") << "</div>";
      h << "<div><b>max error along the head dimension</b><br>" << profile_svg(p->by_feature, p->bound_max, "feature") << "</div></div>";
    } else {
      h << "<p><i>No pictures: " << esc(why) << ".</i></p>";
    }
    h << "<details><summary>minimized case</summary><pre>" << esc(write_case(r.c)) << "</pre></details></div>";
  }
  h << "</body></html>\n";
  const std::string out = run_dir + "/" + rundir::kReportFile;
  rundir::write(out, h.str());  // whole or not at all, even on a full disk
  return out;
}

}  // namespace attnfuzz
