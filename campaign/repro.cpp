#include "campaign/repro.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "harness/case_json.h"
#include "harness/errors.h"
#include "harness/json_input.h"
#include "harness/plugin_path.h"

namespace attnfuzz {
using nlohmann::json;

namespace {
json signature_json(const Signature& s) {
  return {{"backend", s.backend}, {"composition", to_string(s.composition)}, {"tensor", s.tensor_name()}, {"class", to_string(s.cls)}, {"dtype", to_string(s.dtype)},
          {"mask", s.mask}};
}

std::string hex16(uint64_t v) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(v));
  return hex;
}

// FNV-1a 64 over the canonical dump (sorted keys, shortest round-trip numbers) of the parts
// that decide a replay. `case_json` is the case as written in the file, so the checksum does
// not depend on how this build would serialize the case.
uint64_t record_checksum(const json& case_json, const json& backends, const Signature& sig, const std::string& input_checksum_hex) {
  const json covered{{"format", kReproFormat},
                     {"case", case_json},
                     {"backends", backends},
                     {"signature", sig.to_string()},
                     {"input_checksum", input_checksum_hex}};
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : covered.dump()) h = (h ^ ch) * 1099511628211ull;
  return h;
}
}  // namespace

json repro_to_json(const Reproducer& r) {
  json j;
  j["format"] = kReproFormat;
  j["case"] = to_json(r.c);
  j["backends"] = r.backends;
  j["finding"] = {{"signature", signature_json(r.finding.signature)},
                  {"key", r.finding.signature.to_string()},
                  {"detail", r.finding.detail},
                  {"metrics", metrics_by_name(r.finding)},
                  {"rule", r.rule}};
  j["input_checksum"] = hex16(r.input_checksum);
  j["record_checksum"] = hex16(record_checksum(j["case"], j["backends"], r.finding.signature, hex16(r.input_checksum)));
  if (!r.minimized_from.empty()) j["minimized_from"] = r.minimized_from;
  if (r.case_index >= 0) j["case_index"] = r.case_index;
  if (!r.environment.empty()) j["environment"] = r.environment;
  if (!r.backend_sources.empty()) j["backend_sources"] = r.backend_sources;
  return j;
}

std::string write_repro(const Reproducer& r) { return repro_to_json(r).dump(2) + "\n"; }

Reproducer parse_repro(const std::string& text) { return repro_from_json(parse_strict_json(text)); }

Reproducer reproducer_of(const Case& c, const std::vector<std::string>& backends, const Finding& f, const DiffReport& run,
                         std::map<std::string, std::string> environment, BackendSources sources) {
  Reproducer r;
  r.c = c;
  r.backends = portable_backend_names(backends);
  r.backend_sources = std::move(sources);
  r.finding = f;
  r.rule = run.rule.describe();
  r.input_checksum = run.input_checksum;
  r.environment = std::move(environment);
  return r;
}

BackendSources backend_sources(const std::vector<Backend*>& backends) {
  BackendSources out;
  for (const Backend* b : backends) {
    std::map<std::string, std::string> p = b->provenance();
    if (p.empty()) continue;
    // A plugin is known by its file; an adapter by its spec (module, class and options).
    const auto file = p.find("file");
    const std::string key = file != p.end() ? "plugin:" + file->second : p.count("spec") ? "py:" + p.at("spec") : b->name();
    out[key] = std::move(p);
  }
  return out;
}

std::vector<std::string> portable_backend_names(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const std::string& n : names) out.push_back(portable_backend_name(n));
  return out;
}

BackendSources plugin_file_sources(const std::vector<std::string>& names) {
  BackendSources out;
  for (const std::string& n : names)
    if (const auto spec = plugin_spec(n)) try {
        out[portable_backend_name(n)] = plugin_source(resolve_plugin(*spec));
      } catch (const std::exception&) {  // gone since the campaign loaded it: recorded by name only
      }
  return out;
}

std::vector<std::string> runnable_backends(const Reproducer& r, const std::vector<std::string>& names, bool any_build,
                                           std::vector<std::string>* notes) {
  std::vector<std::string> out;
  for (const std::string& name : names) {
    const auto spec = plugin_spec(name);
    if (!spec) {
      out.push_back(name);
      continue;
    }
    const std::string portable = portable_backend_name(name);
    const auto src = r.backend_sources.find(portable);
    std::vector<std::string> hints;
    if (src != r.backend_sources.end())
      if (const auto rec = src->second.find("recorded_path"); rec != src->second.end())
        hints.push_back(std::filesystem::path(rec->second).parent_path().string());
    const std::string path = resolve_plugin(*spec, hints);
    if (src != r.backend_sources.end())
      if (const auto want = src->second.find("content_hash"); want != src->second.end()) {
        const std::string have = plugin_content_hash(path);
        if (have != want->second) {
          const std::string what = portable + ": " + path + " has content hash " + have + ", the reproducer was recorded with " +
                                   want->second;
          if (!any_build)
            throw std::runtime_error(what + ": another build of the plugin. Give the recorded library's folder with --plugin-path, or " +
                                     "pass --any-plugin-build to replay with this one (a fixed plugin, say)");
          if (notes) notes->push_back(what + " (--any-plugin-build: replayed with this one)");
        }
      }
    out.push_back("plugin:" + path);
  }
  return out;
}

Reproducer repro_from_json(const json& j) {
  if (!j.is_object()) throw CaseError("<root>", "expected a JSON object");
  const auto fmt = j.find("format");
  if (fmt == j.end()) throw CaseError("format", std::string("is required ('") + kReproFormat + "')");
  if (!fmt->is_string() || fmt->get<std::string>() != kReproFormat)
    throw CaseError("format", std::string("expected '") + kReproFormat + "', got " + fmt->dump());
  for (const char* key : {"case", "finding", "input_checksum"})
    if (!j.contains(key)) throw CaseError(key, "is required");
  Reproducer r;
  // A reproducer's case ran where it was found, perhaps with its scores on a GPU: its memory is
  // checked wherever it runs again (a worker, `run`, the in-process minimizer).
  r.c = case_from_json(j.at("case"), kNoMemoryBudget);
  std::string input_hex;
  // Each part is read under its own name, so a bad environment is not reported as the finding,
  // and the JSON library's own wording ("[json.exception.type_error.302] ...") is not shown.
  auto part = [](const char* field, const auto& read) {
    try {
      read();
    } catch (const CaseError&) {
      throw;
    } catch (const nlohmann::json::exception& e) {
      std::string why = e.what();
      if (const size_t end = why.find("] "); why.rfind("[json.exception.", 0) == 0 && end != std::string::npos) why.erase(0, end + 2);
      throw CaseError(field, "malformed: " + why);
    } catch (const std::exception& e) {
      throw CaseError(field, std::string("malformed: ") + e.what());
    }
  };
  part("backends", [&] {
    if (j.contains("backends")) r.backends = j.at("backends").get<std::vector<std::string>>();
  });
  part("finding", [&] {
    const json& f = j.at("finding");
    const json& s = f.at("signature");
    r.finding.signature.backend = s.at("backend").get<std::string>();
    const auto comp = composition_class_from_string(s.at("composition").get<std::string>());
    if (!comp)
      throw CaseError("finding.signature.composition",
                      "unknown composition class '" + s.at("composition").get<std::string>() + "' (expected single, q_split, merged or -)");
    r.finding.signature.composition = *comp;
    const std::string tensor = s.at("tensor").get<std::string>();
    if (tensor != "-") {
      r.finding.signature.tensor = from_name(tensor);
      if (!r.finding.signature.tensor) throw CaseError("finding.signature.tensor", "unknown tensor '" + tensor + "'");
    }
    const auto cls = finding_class_from_string(s.at("class").get<std::string>());
    if (!cls) throw CaseError("finding.signature.class", "unknown class '" + s.at("class").get<std::string>() + "'");
    r.finding.signature.cls = *cls;
    try {
      r.finding.signature.dtype = dtype_from_string(s.at("dtype").get<std::string>());
    } catch (const std::invalid_argument& e) {
      throw CaseError("finding.signature.dtype", e.what());
    }
    r.finding.signature.mask = s.at("mask").get<std::string>();
    r.finding.detail = f.value("detail", "");
    r.rule = f.value("rule", "");
    if (f.contains("metrics"))
      for (const auto& [name, v] : f.at("metrics").get<std::map<std::string, double>>()) {
        const auto m = finding_metric_from_string(name);
        if (!m) throw CaseError("finding.metrics", "unknown metric '" + name + "'");
        r.finding.metrics[*m] = v;
      }
  });
  part("input_checksum", [&] {
    input_hex = j.at("input_checksum").get<std::string>();
    if (input_hex.size() != 16 || input_hex.find_first_not_of("0123456789abcdef") != std::string::npos)
      throw CaseError("input_checksum", "expected 16 lowercase hex digits");
    r.input_checksum = std::stoull(input_hex, nullptr, 16);
  });
  part("minimized_from", [&] { r.minimized_from = j.value("minimized_from", ""); });
  part("case_index", [&] { r.case_index = j.value("case_index", int64_t{-1}); });
  part("environment", [&] {
    if (j.contains("environment")) r.environment = j.at("environment").get<std::map<std::string, std::string>>();
  });
  part("backend_sources", [&] {
    if (j.contains("backend_sources")) r.backend_sources = j.at("backend_sources").get<BackendSources>();
  });
  const auto rec = j.find("record_checksum");
  if (rec == j.end()) {
    r.legacy_checksum = true;
  } else {
    const json backends = j.contains("backends") ? j.at("backends") : json(nullptr);
    const std::string want = hex16(record_checksum(j.at("case"), backends, r.finding.signature, input_hex));
    if (!rec->is_string() || rec->get<std::string>() != want)
      throw CaseError("record_checksum",
                      "does not match the reproducer's case, backends, finding and input checksum: "
                      "the file was edited after it was written");
  }
  return r;
}

Reproducer load_repro(const std::string& path) { return parse_repro(read_input_file(path)); }

std::string bucket_of(const Signature& s) { return s.backend + "/" + std::string(to_string(s.composition)) + "/" + s.tensor_name() + "/" + to_string(s.cls); }

namespace {
// The file name of a signature's key: a readable stem and the key's FNV-1a hash.
std::string file_name_of_key(const Signature& s, const std::string& key) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : key) h = (h ^ ch) * 1099511628211ull;
  std::string stem = s.backend + "-" + s.tensor_name() + "-" + to_string(s.cls);
  for (char& ch : stem)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') ch = '_';
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(h));
  return stem + "-" + hex + ".json";
}
}  // namespace

// A bucket's key is the signature's with "*" for the dtype and the mask.
std::string bucket_file_name(const Signature& s) { return file_name_of_key(s, bucket_of(s) + "/*/*"); }

std::string repro_file_name(const Signature& s) { return file_name_of_key(s, s.to_string()); }

}  // namespace attnfuzz
