#include "campaign/coverage.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <set>

#include "campaign/feature_cells.h"
#include "harness/json_input.h"

namespace attnfuzz {
using nlohmann::json;

namespace {

constexpr const char* kOtherReasons = "(other reasons)";

Outcome outcome_from_string(const std::string& s) {
  if (s == "ran") return Outcome::ran;
  if (s == "skipped") return Outcome::skipped;
  if (s == "errored") return Outcome::errored;
  throw std::invalid_argument("unknown outcome '" + s + "'");
}

json counts_json(const CoverageCounts& c, size_t top) {
  json j{{"ran", c.ran}, {"skipped", c.skipped}, {"errored", c.errored}};
  std::vector<std::pair<std::string, ReasonCount>> v;
  uint64_t other = 0;  // reasons beyond the top ones, here or in a summary read back
  for (const auto& [k, rc] : c.reasons) {
    if (k == kOtherReasons)
      other += rc.count;
    else
      v.emplace_back(k, rc);
  }
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.count > b.second.count; });
  json reasons = json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    if (i < top)
      reasons.push_back({{"reason", v[i].first}, {"count", v[i].second.count}, {"example", v[i].second.example}});
    else
      other += v[i].second.count;
  }
  if (other) reasons.push_back({{"reason", kOtherReasons}, {"count", other}, {"example", ""}});
  j["reasons"] = reasons;
  return j;
}

CoverageCounts counts_from_json(const json& j, const std::string& where) {
  CoverageCounts c;
  c.ran = count_at(j, "ran", where);
  c.skipped = count_at(j, "skipped", where);
  c.errored = count_at(j, "errored", where);
  for (const auto& r : j.value("reasons", json::array())) {
    ReasonCount& rc = c.reasons[r.at("reason").get<std::string>()];
    rc.count = checked_sum(rc.count, count_at(r, "count", where + ".reasons"), where + ".reasons");
    rc.example = r.value("example", std::string());
  }
  return c;
}

std::vector<TensorId> tensors_of(const std::vector<std::string>& names) {
  std::vector<TensorId> out;
  for (const std::string& n : names) {
    const auto t = output_from_name(n);
    if (!t) throw std::runtime_error("run outcome: unknown output '" + n + "'");
    out.push_back(*t);
  }
  return out;
}

CompositionClass composition_of(const std::string& s) {
  const auto c = composition_class_from_string(s);
  if (!c) throw std::runtime_error("run outcome: unknown composition class '" + s + "'");
  return *c;
}

}  // namespace

const char* to_string(Outcome o) {
  switch (o) {
    case Outcome::ran:
      return "ran";
    case Outcome::skipped:
      return "skipped";
    case Outcome::errored:
      return "errored";
  }
  return "?";
}

std::vector<RunOutcome> run_outcomes(const DiffReport& r) {
  std::set<std::pair<std::string, CompositionClass>> errors;  // (backend, composition class) with a backend_error
  std::map<std::pair<std::string, CompositionClass>, std::string> error_detail;
  for (const auto& f : r.findings)
    if (f.signature.cls == FindingClass::backend_error || f.signature.cls == FindingClass::out_of_bounds) {
      errors.insert({f.signature.backend, f.signature.composition});
      error_detail.emplace(std::make_pair(f.signature.backend, f.signature.composition), f.detail);
    }
  std::vector<RunOutcome> out;
  for (const auto& run : r.runs) {
    RunOutcome o{run.backend, run.composition_class, Outcome::ran, "", {}, {}};
    for (const auto& t : run.tensors)
      if (t.compared) {
        o.tensors.push_back(t.tensor);
        // No judged block, or a non-finite statistic (a NaN output is its own finding): no signal.
        const double ratio = t.worst.granularity && t.worst.limit > 0 ? t.worst.ratio / t.worst.limit : 0.0;
        o.limit_ratios.push_back(std::isfinite(ratio) ? ratio : 0.0);
      }
    if (run.skipped) {
      const auto key = std::make_pair(run.backend, run.composition_class);
      const bool errored = errors.count(key) > 0;
      o.outcome = errored ? Outcome::errored : Outcome::skipped;
      o.reason = errored ? error_detail[key] : run.skip_reason;
    }
    out.push_back(std::move(o));
  }
  return out;
}

json to_json(const std::vector<RunOutcome>& runs) {
  json a = json::array();
  for (const auto& r : runs) {
    std::vector<std::string> tensors;
    for (TensorId t : r.tensors) tensors.push_back(name_of(t));
    // The ratios trail: a campaign reading an older worker's five elements has none.
    a.push_back({r.backend, to_string(r.composition), to_string(r.outcome), r.reason, tensors, r.limit_ratios});
  }
  return a;
}

std::vector<RunOutcome> run_outcomes_from_json(const json& j) {
  std::vector<RunOutcome> out;
  for (const auto& e : j) {
    RunOutcome o{e.at(0).get<std::string>(), composition_of(e.at(1).get<std::string>()), outcome_from_string(e.at(2).get<std::string>()),
                 e.at(3).get<std::string>(), e.size() > 4 ? tensors_of(e.at(4).get<std::vector<std::string>>()) : std::vector<TensorId>{}, {}};
    if (e.size() > 5) o.limit_ratios = e.at(5).get<std::vector<double>>();
    if (!o.limit_ratios.empty() && o.limit_ratios.size() != o.tensors.size())
      throw std::runtime_error("runs: " + std::to_string(o.limit_ratios.size()) + " limit ratios for " + std::to_string(o.tensors.size()) + " tensors");
    out.push_back(std::move(o));
  }
  return out;
}

std::optional<std::string> why_untested(const Signature& sig, const std::vector<RunOutcome>& runs) {
  const bool any_composition = sig.composition == CompositionClass::none;
  for (const std::string& b : sig.blamed_backends()) {
    std::vector<const RunOutcome*> mine;
    for (const auto& r : runs)
      if (r.backend == b && (any_composition || r.composition == sig.composition)) mine.push_back(&r);
    if (mine.empty())
      return b + " did not run" + (any_composition ? std::string() : " through a " + std::string(to_string(sig.composition)) + " composition") +
             " (not among the backends replayed, or not loaded)";
    for (const RunOutcome* r : mine)
      if (r->outcome != Outcome::ran)
        return b + " " + (r->outcome == Outcome::errored ? "failed" : "skipped the case") + " (" + std::string(to_string(r->composition)) +
               "): " + r->reason.substr(0, r->reason.find('\n'));
    if (sig.names_a_tensor() && std::none_of(mine.begin(), mine.end(), [&](const RunOutcome* r) {
          return std::find(r->tensors.begin(), r->tensors.end(), *sig.tensor) != r->tensors.end();
        }))
      return b + " returned no " + sig.tensor_name();
  }
  return std::nullopt;
}

std::string reason_group(const std::string& reason) {
  std::string line = reason.substr(0, reason.find('\n'));
  if (line.size() > 160) line = line.substr(0, 160) + "...";
  std::string out;
  for (size_t i = 0; i < line.size();) {
    const unsigned char c = static_cast<unsigned char>(line[i]);
    const bool in_name = i > 0 && (std::isalnum(static_cast<unsigned char>(line[i - 1])) || line[i - 1] == '_' || line[i - 1] == '.');
    if (std::isdigit(c) && !in_name) {
      size_t j = i;
      while (j < line.size() && (std::isdigit(static_cast<unsigned char>(line[j])) || line[j] == '.')) ++j;
      if (j < line.size() && (std::isalpha(static_cast<unsigned char>(line[j])) || line[j] == '_')) {
        out.append(line, i, j - i);  // the start of a name (2d, 16bit): kept
      } else {
        out += '#';
      }
      i = j;
      continue;
    }
    out += line[i++];
  }
  return out;
}

void CoverageCounts::add(Outcome o, const std::string& reason) {
  switch (o) {
    case Outcome::ran:
      ++ran;
      return;
    case Outcome::skipped:
      ++skipped;
      break;
    case Outcome::errored:
      ++errored;
      break;
  }
  const std::string full = reason.empty() ? "(no reason given)" : reason.substr(0, reason.find('\n')).substr(0, 400);
  ReasonCount& rc = reasons[reason_group(full)];
  if (rc.count == 0 || full < rc.example) rc.example = full;
  ++rc.count;
}

void CoverageCounts::add(const CoverageCounts& other) {
  // Counts read from files (merge sums shards' summaries) are checked, never wrapped.
  ran = checked_sum(ran, other.ran, "coverage: ran");
  skipped = checked_sum(skipped, other.skipped, "coverage: skipped");
  errored = checked_sum(errored, other.errored, "coverage: errored");
  for (const auto& [k, v] : other.reasons) {
    ReasonCount& rc = reasons[k];
    if (rc.count == 0 || (!v.example.empty() && v.example < rc.example)) rc.example = v.example;
    rc.count = checked_sum(rc.count, v.count, "coverage: reasons");
  }
}

void Coverage::add_backend(const std::string& name) { backends_[name]; }

void Coverage::add_case(const std::vector<RunOutcome>& runs, bool died) {
  const bool any_ran = std::any_of(runs.begin(), runs.end(), [](const RunOutcome& r) { return r.outcome == Outcome::ran; });
  ++(any_ran || died ? judged_cases_ : no_backend_ran_);
  // The backend's outcome for the case: errored beats ran beats skipped; the reason is the
  // first composition's with that outcome.
  std::map<std::string, std::pair<Outcome, std::string>> per_backend;
  for (const auto& r : runs) {
    by_composition_[r.backend][std::string(to_string(r.composition))].add(r.outcome, r.reason);
    auto it = per_backend.find(r.backend);
    auto rank = [](Outcome o) { return o == Outcome::errored ? 2 : o == Outcome::ran ? 1 : 0; };
    if (it == per_backend.end())
      per_backend.emplace(r.backend, std::make_pair(r.outcome, r.reason));
    else if (rank(r.outcome) > rank(it->second.first))
      it->second = {r.outcome, r.reason};
  }
  for (const auto& [b, o] : per_backend) backends_[b].add(o.first, o.second);
}

void AimCounts::add(const AimCounts& o) {
  inside = checked_sum(inside, o.inside, "coverage: inside");
  inside_ran = checked_sum(inside_ran, o.inside_ran, "coverage: inside_ran");
  edge = checked_sum(edge, o.edge, "coverage: edge");
  edge_ran = checked_sum(edge_ran, o.edge_ran, "coverage: edge_ran");
  for (const auto& [clause, n] : o.edge_by_clause) edge_by_clause[clause] = checked_sum(edge_by_clause[clause], n, "coverage: edge");
}

void Coverage::add_aim(const AimedCase& aimed) {
  if (aimed.aim == CaseAim::blind) {
    ++blind_cases_;
    return;
  }
  const auto it = backends_.find(aimed.target);
  const bool ran = it != backends_.end() && it->second.ran > 0;
  AimCounts& a = aims_[aimed.target];
  if (aimed.aim == CaseAim::inside) {
    ++a.inside;
    a.inside_ran += ran;
  } else {
    ++a.edge;
    a.edge_ran += ran;
    if (aimed.outside) ++a.edge_by_clause[clause_name(*aimed.outside)];
  }
}

void Coverage::add_values(const Case& c) {
  for (ValueFeature f : value_features(c)) {
    ValueCounts& v = values_[f];
    ++v.cases;
    v.judged += judged_cases_ > 0;
  }
}

void Coverage::add_features(const Case& c, const std::vector<RunOutcome>& runs) {
  std::map<std::string, std::set<CompositionClass>> ran;
  for (const RunOutcome& r : runs)
    if (r.outcome == Outcome::ran && r.composition != CompositionClass::none) ran[r.backend].insert(r.composition);
  for (const auto& [b, compositions] : ran) {
    for (CompositionClass comp : compositions) ++cells_[b][cell_of(c, comp)];
    for (const CaseFeature& f : side_features()) ++sides_[b][f.name][f.of(c)];
  }
}

void Coverage::set_outside_cells(const std::string& backend, const SupportEnvelope& envelope, bool returns_lse) {
  std::map<std::string, std::string>& outside = outside_[backend];
  outside.clear();
  for (const std::string& cell : all_cells())
    if (const auto why = cell_outside(envelope, returns_lse, cell)) outside[cell] = *why;
}

std::vector<std::string> Coverage::thin_cells(uint64_t min) const {
  std::vector<std::string> out;
  for (const auto& [b, counts] : backends_) {
    const auto cells = cells_.find(b);
    const auto outside = outside_.find(b);
    for (const std::string& cell : all_cells()) {
      if (outside != outside_.end() && outside->second.count(cell)) continue;
      const uint64_t n = cells == cells_.end() || !cells->second.count(cell) ? 0 : cells->second.at(cell);
      if (n < min) out.push_back(b + " " + cell + ": " + std::to_string(n) + " judged");
    }
  }
  return out;
}

void Coverage::add(const Coverage& other) {
  for (const auto& [f, v] : other.values_) {
    values_[f].cases = checked_sum(values_[f].cases, v.cases, "coverage: values");
    values_[f].judged = checked_sum(values_[f].judged, v.judged, "coverage: values");
  }
  for (const auto& [t, a] : other.aims_) aims_[t].add(a);
  blind_cases_ += other.blind_cases_;
  for (const auto& [b, c] : other.backends_) backends_[b].add(c);
  for (const auto& [b, m] : other.by_composition_)
    for (const auto& [comp, c] : m) by_composition_[b][comp].add(c);
  for (const auto& [b, m] : other.cells_)
    for (const auto& [cell, n] : m) cells_[b][cell] = checked_sum(cells_[b][cell], n, "coverage: features");
  for (const auto& [b, m] : other.sides_)
    for (const auto& [f, values] : m)
      for (const auto& [v, n] : values) sides_[b][f][v] = checked_sum(sides_[b][f][v], n, "coverage: features");
  for (const auto& [b, m] : other.outside_) outside_[b].insert(m.begin(), m.end());
  case_errors_.add(other.case_errors_);
  judged_cases_ = checked_sum(judged_cases_, other.judged_cases_, "coverage: judged_cases");
  no_backend_ran_ = checked_sum(no_backend_ran_, other.no_backend_ran_, "coverage: unjudged_cases.no_backend_ran");
}

std::vector<std::string> Coverage::untested() const {
  std::vector<std::string> out;
  for (const auto& [b, c] : backends_)
    if (c.ran == 0) out.push_back(b);
  return out;
}

std::vector<std::pair<std::string, ReasonCount>> Coverage::top_reasons(const std::string& backend, size_t n) const {
  auto it = backends_.find(backend);
  if (it == backends_.end()) return {};
  std::vector<std::pair<std::string, ReasonCount>> v;
  for (const auto& [k, rc] : it->second.reasons)
    if (k != kOtherReasons) v.emplace_back(k, rc);
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.count > b.second.count; });
  if (v.size() > n) v.resize(n);
  return v;
}

std::string Coverage::progress_text() const {
  std::string s;
  for (const auto& [b, c] : backends_) {
    s += (s.empty() ? "" : ", ") + b + " " + std::to_string(c.ran) + "/" + std::to_string(c.skipped) + "/" + std::to_string(c.errored);
    if (c.ran == 0 && c.total() > 0) s += " NOTHING RAN";
  }
  if (case_errors_.errored) s += ", cases the worker could not judge " + std::to_string(case_errors_.errored);
  if (no_backend_ran_) s += ", cases no backend ran " + std::to_string(no_backend_ran_);
  return s;
}

std::vector<std::string> Coverage::warnings() const {
  std::vector<std::string> out;
  for (const auto& b : untested()) {
    const CoverageCounts& c = backends_.at(b);
    std::string w = "backend " + b + " ran no case: " + std::to_string(c.skipped) + " skipped, " + std::to_string(c.errored) + " errored";
    if (c.total() == 0) w += " (it was never reached)";
    const auto top = top_reasons(b, 3);
    if (!top.empty()) {
      w += "; top reasons:";
      for (const auto& [group, rc] : top) w += " " + std::to_string(rc.count) + "x \"" + rc.example + "\"";
    }
    out.push_back(w);
  }
  if (case_errors_.errored) {
    std::string w = std::to_string(case_errors_.errored) + " case(s) could not be judged at all";
    for (const auto& [group, rc] : case_errors_.reasons) {
      w += ": \"" + rc.example + "\"";
      break;
    }
    out.push_back(w);
  }
  return out;
}

json Coverage::to_json(size_t top) const {
  json backends = json::object();
  for (const auto& [b, c] : backends_) {
    json e = counts_json(c, top);
    json comps = json::object();
    if (auto it = by_composition_.find(b); it != by_composition_.end())
      for (const auto& [comp, cc] : it->second) comps[comp] = counts_json(cc, top == SIZE_MAX ? top : std::min<size_t>(top, 3));
    e["by_composition"] = comps;
    backends[b] = e;
  }
  json unjudged = counts_json(case_errors_, top);
  unjudged.erase("ran"), unjudged.erase("skipped");
  unjudged["no_backend_ran"] = no_backend_ran_;
  json values = json::object();
  for (const auto& [f, v] : values_) values[to_string(f)] = json{{"cases", v.cases}, {"judged", v.judged}};
  json aims = json::object();
  for (const auto& [t, a] : aims_)
    aims[t] = json{{"inside", a.inside}, {"inside_ran", a.inside_ran}, {"edge", a.edge}, {"edge_ran", a.edge_ran}, {"edge_by_clause", a.edge_by_clause}};
  return json{{"backends", backends},
              {"untested", untested()},
              {"judged_cases", judged_cases_},
              {"unjudged_cases", unjudged},
              {"case_mix", json{{"blind", blind_cases_}, {"aimed", aims}, {"values", values}}},
              {"features", json{{"cells", cells_}, {"sides", sides_}, {"outside", outside_}}}};
}

Coverage Coverage::from_json(const json& j) {
  Coverage c;
  if (!j.is_object()) return c;
  const json backends = j.value("backends", json::object());
  for (auto it = backends.begin(); it != backends.end(); ++it) {
    const std::string where = "coverage.backends." + it.key();
    c.backends_[it.key()] = counts_from_json(it.value(), where);
    const json comps = it.value().value("by_composition", json::object());
    for (auto ct = comps.begin(); ct != comps.end(); ++ct)
      c.by_composition_[it.key()][ct.key()] = counts_from_json(ct.value(), where + ".by_composition." + ct.key());
  }
  if (j.contains("unjudged_cases")) {
    c.case_errors_ = counts_from_json(j.at("unjudged_cases"), "coverage.unjudged_cases");
    c.no_backend_ran_ = count_at(j.at("unjudged_cases"), "no_backend_ran", "coverage.unjudged_cases");
  }
  // Written before judged cases were counted: those cases are not counted as judged.
  c.judged_cases_ = count_at(j, "judged_cases", "coverage");
  // Written before cases were aimed: every case was blind, and is counted nowhere here.
  if (j.contains("case_mix")) {
    const json& m = j.at("case_mix");
    c.blind_cases_ = count_at(m, "blind", "coverage.case_mix");
    const json aimed = m.value("aimed", json::object());
    for (auto it = aimed.begin(); it != aimed.end(); ++it) {
      const std::string where = "coverage.case_mix.aimed." + it.key();
      AimCounts& a = c.aims_[it.key()];
      a.inside = count_at(it.value(), "inside", where), a.inside_ran = count_at(it.value(), "inside_ran", where);
      a.edge = count_at(it.value(), "edge", where), a.edge_ran = count_at(it.value(), "edge_ran", where);
      const json clauses = it->value("edge_by_clause", json::object());
      for (auto cl = clauses.begin(); cl != clauses.end(); ++cl) a.edge_by_clause[cl.key()] = count_at(clauses, cl.key(), where + ".edge_by_clause");
    }
    // Written before breaking values were generated: none, counted nowhere.
    const json values = m.value("values", json::object());
    for (auto it = values.begin(); it != values.end(); ++it) {
      const std::string where = "coverage.case_mix.values." + it.key();
      const auto f = value_feature_from_string(it.key());
      if (!f) throw std::runtime_error(where + ": unknown value feature");
      c.values_[*f] = ValueCounts{count_at(it.value(), "cases", where), count_at(it.value(), "judged", where)};
    }
  }
  // Written before the feature map: no cell counted.
  if (j.contains("features")) {
    const json& m = j.at("features");
    const json cells = m.value("cells", json::object()), sides = m.value("sides", json::object()),
               outside = m.value("outside", json::object());
    for (auto b = cells.begin(); b != cells.end(); ++b)
      for (auto it = b.value().begin(); it != b.value().end(); ++it)
        c.cells_[b.key()][it.key()] = count_at(b.value(), it.key(), "coverage.features.cells." + b.key());
    for (auto b = sides.begin(); b != sides.end(); ++b)
      for (auto f = b.value().begin(); f != b.value().end(); ++f)
        for (auto it = f.value().begin(); it != f.value().end(); ++it)
          c.sides_[b.key()][f.key()][it.key()] = count_at(f.value(), it.key(), "coverage.features.sides." + b.key() + "." + f.key());
    for (auto b = outside.begin(); b != outside.end(); ++b)
      for (auto it = b.value().begin(); it != b.value().end(); ++it)
        if (it.value().is_string()) c.outside_[b.key()][it.key()] = it.value().get<std::string>();
  }
  return c;
}

}  // namespace attnfuzz
