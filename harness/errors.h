#pragma once
#include <stdexcept>
#include <string>

namespace attnfuzz {

// `text` as it may appear in a one-line message: control characters (a newline in a quoted
// key, an ESC from a terminal sequence) and bytes that are not valid UTF-8 are written as
// \xNN, and anything past max_chars is cut with a note of the full length, so a 50 MB string
// in a case never becomes a 50 MB line on stderr, nor one that moves the cursor.
inline std::string message_safe(const std::string& text, size_t max_chars = 200) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  size_t i = 0;
  for (; i < text.size() && out.size() < max_chars;) {
    const auto b = static_cast<unsigned char>(text[i]);
    // The length of a well-formed UTF-8 sequence starting here (no overlongs, no surrogates), or 0.
    size_t len = 0;
    if (b >= 0x20 && b < 0x7f)
      len = 1;
    else if (b >= 0xc2 && b <= 0xdf)
      len = 2;
    else if (b >= 0xe0 && b <= 0xef)
      len = 3;
    else if (b >= 0xf0 && b <= 0xf4)
      len = 4;
    bool ok = len > 0 && i + len <= text.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    if (ok && len >= 3) {
      const auto b1 = static_cast<unsigned char>(text[i + 1]);
      ok = !(b == 0xe0 && b1 < 0xa0) && !(b == 0xed && b1 >= 0xa0) && !(b == 0xf0 && b1 < 0x90) && !(b == 0xf4 && b1 >= 0x90);
    }
    if (ok) {
      out.append(text, i, len);
      i += len;
    } else {
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
      ++i;
    }
  }
  if (i < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
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
