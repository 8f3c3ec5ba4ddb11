#pragma once
#include <stdexcept>
#include <string>

namespace attnfuzz {

// A Case (or a file holding one) that cannot run. The message is one line that
// names the field and the reason; the CLI prints it and exits with status 2.
class CaseError : public std::runtime_error {
 public:
  CaseError(const std::string& field, const std::string& reason)
      : std::runtime_error("invalid case: " + field + ": " + reason), field_(field) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

}  // namespace attnfuzz
