#include "cli/arg_checks.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "campaign/output_file.h"
#include "harness/errors.h"

namespace attnfuzz::cli {
namespace fs = std::filesystem;

namespace {

std::optional<uint64_t> digits_to_u64(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::string printable(const std::string& text) { return message_safe(text); }

CLI::Validator strict_unsigned() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (digits_to_u64(s)) return {};
        if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos) return "'" + s + "' is over 2^64 - 1";
        return "'" + s + "' is not a non-negative whole number";
      },
      "UINT");
}

CLI::Validator seconds_in(double min, double max) {
  return CLI::Validator(
      [min, max](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || errno == ERANGE)
          return "'" + s + "' is not a number of seconds";
        if (!(v >= min && v <= max))
          return "'" + s + "' seconds: must be at least " + CLI::detail::to_string(min) + " and at most " + CLI::detail::to_string(max);
        return {};
      },
      "SECONDS");
}

CLI::Validator non_empty_path() {
  return CLI::Validator([](std::string& s) -> std::string { return s.empty() ? "an empty path" : std::string(); }, "PATH");
}

void parse_shard(const std::string& text, int& shard, int& shards) {
  const auto slash = text.find('/');
  const auto i = slash == std::string::npos ? std::nullopt : digits_to_u64(text.substr(0, slash));
  const auto n = slash == std::string::npos ? std::nullopt : digits_to_u64(text.substr(slash + 1));
  if (!i || !n) throw std::invalid_argument("--shard takes i/N (two whole numbers, 0 <= i < N), got '" + text + "'");
  if (*n == 0 || *i >= *n || *n > (1u << 20))
    throw std::invalid_argument("--shard " + text + ": needs 0 <= i < N and N <= " + std::to_string(1u << 20));
  shard = static_cast<int>(*i);
  shards = static_cast<int>(*n);
}

std::vector<std::string> parse_devices(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string d = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    bool clean = !d.empty();
    for (unsigned char ch : d) clean = clean && ch > ' ' && ch < 127;
    if (!clean) throw std::invalid_argument("--devices takes comma-separated GPU ids (0,1 or GPU-<uuid>), got '" + text + "'");
    out.push_back(d);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

void refuse_repeated_backends(const std::vector<std::string>& backends) {
  for (size_t i = 0; i < backends.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (backends[i] == backends[j]) throw std::invalid_argument("--backends: '" + backends[i] + "' is given twice");
}

std::optional<std::string> writable_directory(const std::string& flag, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return flag + " " + dir + ": cannot create the directory: " + ec.message();
  if (!fs::is_directory(dir, ec)) return flag + " " + dir + ": not a directory";
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return flag + " " + dir + ": not writable: " + std::strerror(errno);
  return std::nullopt;
}

std::optional<std::string> writable_file(const std::string& flag, const std::string& path) {
  if (const auto why = unwritable_output(path)) return flag + " " + message_safe(path) + ": " + *why;
  return std::nullopt;
}

}  // namespace attnfuzz::cli
