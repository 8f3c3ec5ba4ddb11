#include "campaign/known.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "campaign/composition_calls.h"
#include "harness/errors.h"
#include "harness/json_input.h"
#include "harness/layout.h"

namespace attnfuzz {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

int64_t element_bytes(DType d) { return d == DType::f32 ? 4 : 2; }

// Whether, in some call of the composition, an input the backend reads has a batch, head or row
// stride or an offset (in bytes) that is not a multiple of `bytes`. Per call: a part's shape
// changes its strides, and a part whose shape a packing does not fit gets each tensor's own
// layout (harness/layout.h).
bool has_unaligned_rows(const Case& c, int64_t bytes) {
  const int64_t e = element_bytes(c.dtype);
  for (const CompositionCall& call : composition_calls(c))
    for (TensorId r : {TensorId::Q, TensorId::K, TensorId::V, TensorId::dO}) {
      const Placement p = place(c.layouts, r, call.shape);
      for (int64_t v : {p.strides[0], p.strides[1], p.strides[2], p.offset})
        if ((v * e) % bytes != 0) return true;
    }
  return false;
}

bool has_masked_row_in_a_call(const Case& c) {
  for (const CompositionCall& call : composition_calls(c))
    if (call.masked_row) return true;
  return false;
}

std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(' '), b = s.find_last_not_of(' ');
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

// "a|b|c" -> {a, b, c}; a text without a bar is one alternative.
std::vector<std::string> alternatives(const std::string& text) {
  std::vector<std::string> out;
  for (size_t start = 0;;) {
    const size_t bar = text.find('|', start);
    out.push_back(text.substr(start, bar == std::string::npos ? std::string::npos : bar - start));
    if (bar == std::string::npos) return out;
    start = bar + 1;
  }
}

// A score bias tensor broadcast over the keys ([..][..][..][1]): a float attn_mask whose last
// dimension has stride 0 when a backend expands it.
bool has_bias_broadcast_over_keys(const Case& c) {
  return c.bias && c.bias->kind == ScoreBias::Kind::tensor && !c.bias->spans[3];
}

// "name(arg)" -> {name, arg}; a bare name has no argument.
std::pair<std::string, std::string> split_term(const std::string& term) {
  const auto open = term.find('(');
  if (open == std::string::npos) return {term, ""};
  if (term.back() != ')') throw std::invalid_argument("predicate term '" + term + "': missing ')'");
  return {term.substr(0, open), term.substr(open + 1, term.size() - open - 2)};
}

CasePredicate parse_term(const std::string& term) {
  const auto [name, arg] = split_term(term);
  if (name == "always" && arg.empty()) return [](const Case&) { return true; };
  if (name == "masked_rows" && arg.empty()) return has_masked_row_in_a_call;
  if (name == "head_dims_differ" && arg.empty()) return [](const Case& c) { return c.shape.head_dim_qk != c.shape.head_dim_v; };
  if (name == "bias_broadcast_kv" && arg.empty()) return has_bias_broadcast_over_keys;
  if (name == "unaligned_rows") {
    int64_t bytes = 0;
    try {
      size_t used = 0;
      bytes = std::stoll(arg, &used);
      if (used != arg.size()) bytes = 0;
    } catch (const std::exception&) {}
    if (bytes <= 0) throw std::invalid_argument("predicate term '" + term + "': unaligned_rows takes a positive byte count");
    return [bytes](const Case& c) { return has_unaligned_rows(c, bytes); };
  }
  if (name == "dtype") {
    std::vector<DType> dtypes;
    for (const std::string& one : alternatives(arg)) try {
        dtypes.push_back(dtype_from_string(one));
      } catch (const std::invalid_argument&) {
        throw std::invalid_argument("predicate term '" + term + "': unknown dtype '" + one + "'");
      }
    return [dtypes](const Case& c) { return std::find(dtypes.begin(), dtypes.end(), c.dtype) != dtypes.end(); };
  }
  throw std::invalid_argument("predicate term '" + term +
                              "': unknown (known: unaligned_rows(N), masked_rows, head_dims_differ, bias_broadcast_kv, dtype(a|b), always)");
}

// "*" (any), one value, or alternatives "a|b".
bool field_matches(const std::string& pattern, const std::string& value) {
  if (pattern == "*") return true;
  const std::vector<std::string> any = alternatives(pattern);
  return std::find(any.begin(), any.end(), value) != any.end();
}

KnownDeviation load_one(const json& j, const std::string& path) {
  KnownDeviation k;
  k.path = path;
  k.source = j.dump();
  k.repro = repro_from_json(j);
  k.id = fs::path(path).stem().string();
  const Signature& own = k.repro.finding.signature;
  k.pattern = {own.backend, std::string(to_string(own.composition)), own.tensor_name()};
  k.when = "always";
  if (j.contains("known")) {
    const json& known = j.at("known");
    if (!known.is_object()) throw CaseError("known", "expected an object");
    k.id = known.value("id", k.id);
    if (known.contains("covers")) {
      const json& covers = known.at("covers");
      k.pattern.backend = covers.value("backend", k.pattern.backend);
      k.pattern.composition = covers.value("composition", k.pattern.composition);
      k.pattern.tensor = covers.value("tensor", k.pattern.tensor);
      const std::string cls = covers.value("class", to_string(k.repro.finding.signature.cls));
      if (cls == "*") {
        k.any_class = true;
      } else {
        for (const std::string& one : alternatives(cls)) {
          const auto parsed = finding_class_from_string(one);
          if (!parsed) throw CaseError("known.covers.class", "unknown class '" + one + "'");
          k.classes.push_back(*parsed);
        }
      }
    }
    k.when = known.value("when", k.when);
  }
  if (k.classes.empty()) k.classes.push_back(k.repro.finding.signature.cls);  // the reproducer's own class
  try {
    k.predicate = parse_case_predicate(k.when);
  } catch (const std::invalid_argument& e) {
    throw CaseError("known.when", e.what());
  }
  return k;
}

bool is_reproducer(const std::string& path) {
  try {
    const json j = parse_strict_json(read_input_file(path));
    return j.is_object() && j.value("format", "") == kReproFormat;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

CasePredicate parse_case_predicate(const std::string& text) {
  std::vector<CasePredicate> terms;
  const std::string sep = " and ";
  size_t start = 0;
  for (;;) {
    const size_t at = text.find(sep, start);
    const std::string term = trim(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (term.empty()) throw std::invalid_argument("predicate '" + text + "': empty term");
    terms.push_back(parse_term(term));
    if (at == std::string::npos) break;
    start = at + sep.size();
  }
  return [terms](const Case& c) { return std::all_of(terms.begin(), terms.end(), [&](const CasePredicate& t) { return t(c); }); };
}

bool KnownDeviation::covers(const Reproducer& finding) const {
  const Signature& s = finding.finding.signature;
  return field_matches(pattern.backend, s.backend) && field_matches(pattern.composition, std::string(to_string(s.composition))) &&
         field_matches(pattern.tensor, s.tensor_name()) && (any_class || std::find(classes.begin(), classes.end(), s.cls) != classes.end()) && predicate(finding.c);
}

KnownFindings KnownFindings::load(const std::vector<std::string>& paths) {
  KnownFindings out;
  for (const auto& p : paths) {
    std::error_code ec;
    std::vector<std::string> files;
    if (fs::is_directory(p, ec)) {
      // An entry that cannot be examined (a symbolic link loop, say) is an error, not a
      // deviation silently left out; so is a directory without a single reproducer.
      for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        std::error_code status_ec;
        const bool regular = it->is_regular_file(status_ec);
        if (status_ec) throw std::runtime_error("--known " + it->path().string() + ": " + status_ec.message());
        if (regular && it->path().extension() == ".json" && is_reproducer(it->path().string())) files.push_back(it->path().string());
      }
      if (ec) throw std::runtime_error("--known " + p + ": " + ec.message());
      if (files.empty()) throw std::runtime_error("--known " + p + ": no reproducer (" + std::string(kReproFormat) + " JSON) in this directory");
      std::sort(files.begin(), files.end());
    } else if (fs::exists(p, ec)) {
      files.push_back(p);
    } else {
      throw std::runtime_error("--known " + p + ": no such file or directory");
    }
    for (const auto& f : files) {
      try {
        out.known_.push_back(load_one(parse_strict_json(read_input_file(f)), f));
      } catch (const std::exception& e) {
        throw std::runtime_error("--known " + f + ": " + e.what());
      }
    }
  }
  return out;
}

std::string KnownFindings::snapshot_json() const {
  json deviations = json::array();
  for (const auto& k : known_) deviations.push_back({{"path", k.path}, {"reproducer", json::parse(k.source)}});
  return json{{"format", kKnownSetFormat}, {"deviations", deviations}}.dump(1) + "\n";
}

KnownFindings KnownFindings::from_snapshot(const std::string& text) {
  KnownFindings out;
  const json j = parse_strict_json(text);
  if (!j.is_object() || j.value("format", "") != kKnownSetFormat)
    throw std::runtime_error(std::string("not an ") + kKnownSetFormat + " file");
  const auto d = j.find("deviations");
  if (d == j.end() || !d->is_array()) throw std::runtime_error("deviations: expected an array");
  for (const auto& e : *d) {
    if (!e.is_object() || !e.contains("path") || !e.at("path").is_string() || !e.contains("reproducer"))
      throw std::runtime_error("deviations: expected {\"path\", \"reproducer\"} entries");
    const std::string path = e.at("path").get<std::string>();
    try {
      out.known_.push_back(load_one(e.at("reproducer"), path));
    } catch (const std::exception& ex) {
      throw std::runtime_error("deviation from " + path + ": " + ex.what());
    }
  }
  return out;
}

const KnownDeviation* KnownFindings::covering(const Reproducer& finding) const {
  for (const auto& k : known_)
    if (k.covers(finding)) return &k;
  return nullptr;
}

}  // namespace attnfuzz
