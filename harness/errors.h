#pragma once
#include <stdexcept>
#include <string>

namespace attnfuzz {

// `text` as it may appear in a one-line message: control characters (a newline in a quoted
// key, say) become '?', and anything past max_chars is cut with a note of the full length,
// so a 50 MB string in a case never becomes a 50 MB line on stderr.
inline std::string message_safe(const std::string& text, size_t max_chars = 200) {
  std::string out = text.substr(0, max_chars);
  for (char& ch : out)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  if (text.size() > max_chars) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

// A Case (or a file holding one) that cannot run. The message is one line that
// names the field and the reason; the CLI prints it and exits with status 2. Both
// parts may quote the input, so both are cut to a bounded length.
class CaseError : public std::runtime_error {
 public:
  CaseError(const std::string& field, const std::string& reason)
      : std::runtime_error("invalid case: " + message_safe(field, 200) + ": " + message_safe(reason, 400)),
        field_(message_safe(field, 200)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

}  // namespace attnfuzz
