#pragma once
// The Case's JSON form ("format": "attnfuzz-case/1"). Parsing is strict: an
// unknown key, a wrong type or a value out of range is a CaseError naming the
// field, so a typo in a hand-written reproducer never silently changes the case.
#include <nlohmann/json.hpp>
#include <string>

#include "harness/case.h"

namespace attnfuzz {

nlohmann::json to_json(const Case& c);
nlohmann::json to_json(const MaskExpr& m);
nlohmann::json to_json(const Composition& c);
// Parses and validates. Throws CaseError.
Case case_from_json(const nlohmann::json& j, const Limits& limits = {});
Case case_from_string(const std::string& text, const Limits& limits = {});
// Reads a case file, or the "case" member of a reproducer file. Throws CaseError.
Case load_case_file(const std::string& path, const Limits& limits = {});
std::string write_case(const Case& c);  // pretty JSON with a trailing newline

}  // namespace attnfuzz
