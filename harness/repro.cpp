#include "harness/repro.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "harness/case_json.h"
#include "harness/errors.h"

namespace attnfuzz {
using nlohmann::json;

namespace {
json signature_json(const Signature& s) {
  return {{"backend", s.backend}, {"composition", s.composition}, {"tensor", s.tensor},
          {"class", to_string(s.cls)}, {"dtype", s.dtype},           {"mask", s.mask}};
}
}  // namespace

std::string write_repro(const Reproducer& r) {
  json j;
  j["format"] = kReproFormat;
  j["case"] = to_json(r.c);
  j["backends"] = r.backends;
  j["finding"] = {{"signature", signature_json(r.finding.signature)}, {"key", r.finding.signature.to_string()},
                  {"detail", r.finding.detail}, {"metrics", r.finding.metrics}, {"rule", r.rule}};
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r.input_checksum));
  j["input_checksum"] = hex;
  if (!r.minimized_from.empty()) j["minimized_from"] = r.minimized_from;
  if (r.case_index >= 0) j["case_index"] = r.case_index;
  if (!r.environment.empty()) j["environment"] = r.environment;
  return j.dump(2) + "\n";
}

Reproducer parse_repro(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers like 1E99999
    throw CaseError("<json>", std::string("malformed JSON: ") + e.what());
  }
  if (!j.is_object() || j.value("format", "") != kReproFormat)
    throw CaseError("format", std::string("expected '") + kReproFormat + "'");
  Reproducer r;
  if (!j.contains("case")) throw CaseError("case", "is required");
  r.c = case_from_json(j.at("case"));
  try {
    if (j.contains("backends")) r.backends = j.at("backends").get<std::vector<std::string>>();
    if (j.contains("finding")) {
      const json& f = j.at("finding");
      const json& s = f.at("signature");
      r.finding.signature.backend = s.at("backend").get<std::string>();
      r.finding.signature.composition = s.at("composition").get<std::string>();
      r.finding.signature.tensor = s.at("tensor").get<std::string>();
      const auto cls = finding_class_from_string(s.at("class").get<std::string>());
      if (!cls) throw CaseError("finding.signature.class", "unknown class '" + s.at("class").get<std::string>() + "'");
      r.finding.signature.cls = *cls;
      r.finding.signature.dtype = s.at("dtype").get<std::string>();
      r.finding.signature.mask = s.at("mask").get<std::string>();
      r.finding.detail = f.value("detail", "");
      r.rule = f.value("rule", "");
      if (f.contains("metrics")) r.finding.metrics = f.at("metrics").get<std::map<std::string, double>>();
    }
    if (j.contains("input_checksum")) r.input_checksum = std::stoull(j.at("input_checksum").get<std::string>(), nullptr, 16);
    r.minimized_from = j.value("minimized_from", "");
    r.case_index = j.value("case_index", int64_t{-1});
    if (j.contains("environment")) r.environment = j.at("environment").get<std::map<std::string, std::string>>();
  } catch (const CaseError&) {
    throw;
  } catch (const std::exception& e) {
    throw CaseError("finding", std::string("malformed: ") + e.what());
  }
  return r;
}

Reproducer load_repro(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CaseError("<file>", "cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_repro(ss.str());
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write " + tmp);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error("write failed: " + tmp);
    }
    done += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot rename " + tmp + " to " + path);
  }
}

std::string bucket_of(const Signature& s) { return s.backend + "/" + s.composition + "/" + s.tensor + "/" + to_string(s.cls); }

std::string bucket_file_name(const Signature& s) {
  Signature b = s;
  b.dtype = b.mask = "*";
  return repro_file_name(b);
}

std::string repro_file_name(const Signature& s) {
  const std::string key = s.to_string();
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : key) h = (h ^ ch) * 1099511628211ull;
  std::string stem = s.backend + "-" + s.tensor + "-" + to_string(s.cls);
  for (char& ch : stem)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') ch = '_';
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(h));
  return stem + "-" + hex + ".json";
}

}  // namespace attnfuzz
